package parquetbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// benchWriters is the concurrency of the group-commit comparison.
const benchWriters = 64

// appendConcurrently appends n records from benchWriters goroutines with
// the given append function.
func appendConcurrently(n int, appendFn func(r *outbox.Record) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchWriters)
	for w := range benchWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				r := dispatchRec(fmt.Sprintf("run%d", w), fmt.Sprintf("task%d", i), "1", outbox.StatusCreated)
				r.UpdatedAt, r.CreatedAt = t0, t0
				if err := appendFn(&r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// fsyncPerRecord is the baseline: every append writes its frame and syncs
// the file itself, one after the other.
type fsyncPerRecord struct {
	mu  sync.Mutex
	f   *os.File
	buf []byte
}

func (s *fsyncPerRecord) append(r *outbox.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = appendFrame(s.buf[:0], r)
	if _, err := s.f.Write(s.buf); err != nil {
		return err
	}
	return s.f.Sync()
}

// BenchmarkDurableAppend compares group commit with one fsync per record,
// both with 64 concurrent writers on the same disk, in one run:
//
//	go test -run '^$' -bench DurableAppend -benchtime 3000x ./outbox/
func BenchmarkDurableAppend(b *testing.B) {
	b.Run("group-commit", func(b *testing.B) {
		o, err := Open(context.Background(), Config{Root: b.TempDir(), SegmentMaxBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		defer o.Close()
		b.ResetTimer()
		err = appendConcurrently(b.N, func(r *outbox.Record) error { return outbox.AppendAndWait(context.Background(), o, *r) })
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	})
	b.Run("fsync-per-record", func(b *testing.B) {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "base.wal"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, filePerm)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		s := &fsyncPerRecord{f: f}
		b.ResetTimer()
		err = appendConcurrently(b.N, s.append)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	})
}

// BenchmarkGroupCommit measures durable appends from benchWriters
// concurrent writers through the outbox's group commit, and the baseline
// of one write and one fsync per record on the same disk; the ratio of
// their ns/op is what the group commit saves (see BENCHMARKS.md).
func BenchmarkGroupCommit(b *testing.B) {
	ctx := context.Background()
	b.Run("group-commit", func(b *testing.B) {
		o, err := Open(ctx, Config{Root: b.TempDir(), SegmentMaxBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		defer o.Close()
		b.ResetTimer()
		if err := appendConcurrently(b.N, func(r *outbox.Record) error { return outbox.AppendAndWait(ctx, o, *r) }); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("fsync-per-record", func(b *testing.B) {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "base.wal"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, filePerm)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		s := &fsyncPerRecord{f: f}
		b.ResetTimer()
		if err := appendConcurrently(b.N, s.append); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkLatest measures the dispatcher's per-call question against an
// outbox of 20 files of 2000 records each:
//
//	go test -run '^$' -bench Latest ./outbox/
func BenchmarkLatest(b *testing.B) {
	ctx := context.Background()
	root := b.TempDir()
	writer, err := Open(ctx, Config{Root: root})
	if err != nil {
		b.Fatal(err)
	}
	for f := range 20 {
		for i := range 2000 {
			if err := writer.Append(ctx, dispatchRec(fmt.Sprintf("run%d", f), fmt.Sprintf("task%d", i), "1", outbox.StatusCreated), nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := writer.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if err := writer.Close(); err != nil {
		b.Fatal(err)
	}
	o, err := Open(ctx, Config{Root: root})
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	if err := outbox.AppendAndWait(ctx, o, dispatchRec("own", "task", "1", outbox.StatusCreated)); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name, id string
		found    bool
	}{
		{"own-record", "dispatch:own:task:1", true},
		{"in-a-file", "dispatch:run7:task1234:1", true},
		{"new-id", "dispatch:run7:task1234:2", false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				_, found, err := o.Latest(ctx, outbox.TableDispatch, bc.id)
				if err != nil || found != bc.found {
					b.Fatal(found, err)
				}
			}
		})
	}
}
