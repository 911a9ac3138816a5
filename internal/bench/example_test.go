package bench_test

import (
	"os"
	"time"

	"github.com/ctdispatch/ctdispatch/internal/bench"
)

// A report's table lists each mode with its throughput, latency
// percentiles, allocations and CPU per call, its ratio against create-bare
// and, for dispatch-batched, against batch-bare.
func ExampleReport_WriteTable() {
	rep := &bench.Report{
		Config:     bench.Config{Count: 20000}.WithDefaults(),
		Emulator:   "in-process",
		GOMAXPROCS: 2,
		Results: []bench.Result{
			{Mode: bench.ModeCreateBare, Ops: 20000, Throughput: 12000, P50: 4200 * time.Microsecond, P99: 21 * time.Millisecond, AllocsPerOp: 297.5, CPUPer1000: 0.16},
			{Mode: bench.ModeBatchBare, Ops: 20000, Throughput: 60000, P50: 9 * time.Millisecond, P99: 14 * time.Millisecond, AllocsPerOp: 120, CPUPer1000: 0.03},
			{Mode: bench.ModeDispatch, Ops: 20000, Throughput: 11000, P50: 4500 * time.Microsecond, P99: 25 * time.Millisecond, AllocsPerOp: 330, CPUPer1000: 0.19},
			{Mode: bench.ModeDispatchBatched, Ops: 20000, Throughput: 51000, P50: 1200 * time.Microsecond, P99: 9 * time.Millisecond, AllocsPerOp: 160, CPUPer1000: 0.05},
			{Mode: bench.ModeNaming, Ops: 20000, Throughput: 2_400_000, P50: 250 * time.Nanosecond, P99: 1100 * time.Nanosecond, AllocsPerOp: 3},
		},
	}
	bench.SetRatios(rep.Results)
	_ = rep.WriteTable(os.Stdout)
	// Output:
	// 20000 calls per mode in 4 rounds, 64 concurrent callers, payload 256 B, duplicate ratio 0, fault rate 0, commit-then-fail rate 0, emulator latency 0s, batch-bare size 64, batch in flight 4, emulator in-process, GOMAXPROCS 2
	// mode                ops  errors    ops/s     p50      p99  allocs/op  cpu s/1k  vs create-bare  vs batch-bare
	// create-bare       20000       0    12000  4.20ms  21.00ms      297.5     0.160           1.00x              -
	// batch-bare        20000       0    60000  9.00ms  14.00ms      120.0     0.030           5.00x              -
	// dispatch          20000       0    11000  4.50ms  25.00ms      330.0     0.190           0.92x              -
	// dispatch-batched  20000       0    51000  1.20ms   9.00ms      160.0     0.050           4.25x          0.85x
	// naming            20000       0  2400000   0.2µs    1.1µs        3.0     0.000         200.00x              -
}
