package parquetbox

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/internal/bucket"
	"github.com/ctdispatch/ctdispatch/outbox/internal/pqtable"
)

// writeRounds writes rounds files of perRound dispatches each (a pending
// state for every tenth, then the outcome) into one day of a table under
// root, bucketed as a dispatcher with Config.Buckets = buckets writes
// them: the input of a day's compaction.
func writeRounds(tb testing.TB, root string, rounds, perRound, buckets int) {
	tb.Helper()
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	dir := filepath.Join(root, string(outbox.TableDispatch), partitionKey+day.Format(time.DateOnly))
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		tb.Fatal(err)
	}
	for round := range rounds {
		byBucket := map[string][]outbox.Record{}
		for i := range perRound {
			n := round*perRound + i
			id, err := naming.NewDispatch(fmt.Sprintf("run%d", n/1000), fmt.Sprintf("task%d", n/2%500), naming.Attempt(uint64(n%2+1)))
			if err != nil {
				tb.Fatal(err)
			}
			at := day.Add(time.Duration(n) * 100 * time.Millisecond)
			r := outbox.Record{Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(),
				Queue: testQueue, RunID: id.RunID(), TaskKey: id.TaskKey(), Attempt: id.Attempt(),
				Status: outbox.StatusPending, ProcessorUUID: procA, PayloadSHA256: fmt.Sprintf("%064x", n/2),
				CreatedAt: at, UpdatedAt: at}
			b := bucket.FilePrefix(r.ID, buckets)
			if n%10 == 0 {
				byBucket[b] = append(byBucket[b], r)
			}
			r.Status, r.CreateCalls, r.UpdatedAt = outbox.StatusCreated, 1, at.Add(40*time.Millisecond)
			byBucket[b] = append(byBucket[b], r)
		}
		for b, recs := range byBucket {
			sortRecords(recs)
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%sround-%04d.parquet", b, round)))
			if err != nil {
				tb.Fatal(err)
			}
			bw := bufio.NewWriterSize(f, 1<<20)
			fw, err := pqtable.NewRecordWriter(bw, outbox.TableDispatch)
			if err != nil {
				tb.Fatal(err)
			}
			for _, r := range recs {
				if err := fw.Write(r); err != nil {
					tb.Fatal(err)
				}
			}
			if err := fw.Close(); err != nil {
				tb.Fatal(err)
			}
			if err := bw.Flush(); err != nil {
				tb.Fatal(err)
			}
			if err := f.Close(); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// BenchmarkCompactDay folds a day of 16 rounds of 20,000 dispatches (8
// buckets), never compacted, into one run per bucket: the work DuckDB's
// fold is compared with in scripts/compaction-bench. Profile it with
//
//	go test ./outbox/parquetbox/ -run '^$' -bench CompactDay -benchtime 3x -cpuprofile /tmp/cpu.out -o /tmp/parquetbox.test
func BenchmarkCompactDay(b *testing.B) {
	src := b.TempDir()
	writeRounds(b, src, 16, 20_000, 8)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		root := filepath.Join(b.TempDir(), fmt.Sprint(i))
		if out, err := exec.Command("cp", "-r", src, root).CombinedOutput(); err != nil {
			b.Fatal(err, string(out))
		}
		o, err := Open(ctx, Config{Root: root, ReadOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		st, err := o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(float64(st.Tables[0].BytesOut), "bytes-out")
		o.Close()
		b.StartTimer()
	}
}
