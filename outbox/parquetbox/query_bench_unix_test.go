//go:build unix

package parquetbox

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// BenchmarkQueryOnce measures what `ctdispatch query --dispatch-id` does
// in one process, past the process start: open an outbox read-only, look
// one ID up (all fields for json and csv, a summary for the table), close
// it.
//
//	CTDISPATCH_QUERY_ROOT=/tmp/ob50m go test -run '^$' -bench QueryOnce -cpuprofile cpu.out ./outbox/
func BenchmarkQueryOnce(b *testing.B) {
	root := os.Getenv("CTDISPATCH_QUERY_ROOT")
	if root == "" {
		b.Skip("set CTDISPATCH_QUERY_ROOT to an outbox made by gendata")
	}
	ctx := context.Background()
	for _, summary := range []bool{false, true} {
		b.Run(fmt.Sprintf("summary=%v", summary), func(b *testing.B) {
			q := outbox.Query{Table: outbox.TableDispatch, ID: "dispatch:run25000:task250:1", Summary: summary}
			cpu0 := cpuTime(b)
			for b.Loop() {
				o, err := Open(ctx, Config{Root: root, ReadOnly: true})
				if err != nil {
					b.Fatal(err)
				}
				recs, err := o.Lookup(ctx, q)
				if err != nil || len(recs) != 1 {
					b.Fatal(len(recs), err)
				}
				o.Close()
			}
			// The machine may be shared: the CPU time spent is steadier
			// than the time it took.
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime returns the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
