package bench_test

import (
	"os"
	"time"

	"github.com/ctdispatch/ctdispatch/internal/bench"
)

// A report's table lists each mode with its throughput, latency
// percentiles, allocations per call and its ratio against create-bare.
func ExampleReport_WriteTable() {
	rep := &bench.Report{
		Config:     bench.Config{Count: 20000}.WithDefaults(),
		Emulator:   "in-process",
		GOMAXPROCS: 2,
		Results: []bench.Result{
			{Mode: bench.ModeCreateBare, Ops: 20000, Throughput: 12000, P50: 4200 * time.Microsecond, P99: 21 * time.Millisecond, AllocsPerOp: 297.5},
			{Mode: bench.ModeDispatchDurable, Ops: 20000, Throughput: 9000, P50: 6 * time.Millisecond, P99: 1500 * time.Millisecond, AllocsPerOp: 314},
			{Mode: bench.ModeNaming, Ops: 20000, Throughput: 2_400_000, P50: 250 * time.Nanosecond, P99: 1100 * time.Nanosecond, AllocsPerOp: 3},
		},
	}
	bench.SetRatios(rep.Results)
	_ = rep.WriteTable(os.Stdout)
	// Output:
	// 20000 calls per mode in 4 rounds, 64 concurrent callers, payload 256 B, duplicate ratio 0, fault rate 0, commit-then-fail rate 0, emulator in-process, GOMAXPROCS 2
	// mode                ops  errors    ops/s     p50      p99  allocs/op  vs create-bare
	// create-bare       20000       0    12000  4.20ms  21.00ms      297.5           1.00x
	// dispatch-durable  20000       0     9000  6.00ms    1.50s      314.0           0.75x
	// naming            20000       0  2400000   0.2µs    1.1µs        3.0         200.00x
}
