package parquetbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/stretchr/testify/require"
)

func TestParseRetention(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Retention
		err  string
	}{
		{in: "", want: Retention{}},
		{in: "orders=7d, audit=30d,*=0", want: Retention{"orders": 7 * 24 * time.Hour, "audit": 30 * 24 * time.Hour, "*": 0}},
		{in: "q=36h", want: Retention{"q": 36 * time.Hour}},
		{in: "q", err: `retention "q": want queue=duration, for example orders=7d`},
		{in: "q=7x", err: `retention "q=7x": duration "7x": want a number of days (7d), a Go duration (36h) or 0`},
		{in: "q=-1h", err: `retention "q=-1h": duration "-1h": want a number of days (7d), a Go duration (36h) or 0`},
		{in: "q=1d,q=2d", err: `retention "q=2d": queue "q" given twice`},
	} {
		got, err := ParseRetention(tc.in)
		if tc.err != "" {
			require.EqualError(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	r := Retention{"orders": time.Hour, "*": time.Minute}
	d, ok := r.For("projects/p/locations/l/queues/orders")
	require.Equal(t, time.Hour, d)
	require.True(t, ok)
	d, ok = r.For("projects/p/locations/l/queues/other")
	require.Equal(t, time.Minute, d)
	require.True(t, ok)
	_, ok = Retention{}.For("x")
	require.False(t, ok)
}

func TestCompactFoldsSortsAndAppliesRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	a := b.open(t, procA)
	bb := b.open(t, procB)
	const keepQueue = "projects/p/locations/l/queues/keep"

	// Day 0: three attempts pending, one settled by B; a timer on another queue.
	for _, task := range []string{"c", "a", "b"} {
		require.NoError(t, outbox.AppendAndWait(ctx, a, dispatchRec("r1", task, "1", outbox.StatusPending)))
	}
	require.NoError(t, a.Flush(ctx))
	b.clock.Advance(time.Minute)
	require.NoError(t, outbox.AppendAndWait(ctx, bb, dispatchRec("r1", "a", "1", outbox.StatusCreated)))
	keep := dispatchRec("r1", "z", "1", outbox.StatusFailed)
	keep.Queue = keepQueue
	require.NoError(t, outbox.AppendAndWait(ctx, bb, keep))
	require.NoError(t, bb.Flush(ctx))
	// Day 10: b settles; c stays pending forever.
	b.clock.Advance(10 * 24 * time.Hour)
	require.NoError(t, outbox.AppendAndWait(ctx, a, dispatchRec("r1", "b", "1", outbox.StatusAlreadyExisted)))
	require.NoError(t, a.Flush(ctx))

	dir := filepath.Join(b.root, string(outbox.TableDispatch))
	before, _ := filepath.Glob(filepath.Join(dir, "*", "*.parquet"))
	require.Len(t, before, 3)

	// Compact reports through CompactConfig.Trace what compact returns.
	var progress []int64
	var st compactStats
	err := a.Compact(ctx, CompactConfig{
		Tables:    []outbox.Table{outbox.TableDispatch},
		Retention: Retention{"q": 7 * 24 * time.Hour},
		Trace: &CompactTrace{
			Progress: func(_ outbox.Table, done, _ int64) { progress = append(progress, done) },
			Table:    func(tc TableCompaction) { st.Tables = append(st.Tables, tc) },
		},
	})
	require.NoError(t, err)
	require.Len(t, st.Tables, 1)
	tc := st.Tables[0]
	require.Equal(t, 3, tc.FilesIn)
	require.Equal(t, 1, tc.FilesOut)
	require.Equal(t, int64(6), tc.RowsIn)
	require.Equal(t, int64(3), tc.RowsOut)
	require.Equal(t, int64(1), tc.Dropped, "a: created 10 days ago on a 7d queue")
	require.Equal(t, int64(6), progress[len(progress)-1])
	after, _ := filepath.Glob(filepath.Join(dir, "*", "*.parquet"))
	require.Equal(t, []string{tc.Output}, after)

	got, err := a.Lookup(ctx, outbox.Query{RunID: "r1", History: true})
	require.NoError(t, err)
	var summary []string
	for _, r := range got {
		summary = append(summary, fmt.Sprintf("%s %s %s", r.ID, r.Status, r.ProcessorUUID[len(r.ProcessorUUID)-1:]))
	}
	require.Equal(t, []string{
		"dispatch:r1:b:1 already_existed a",
		"dispatch:r1:c:1 pending a",
		"dispatch:r1:z:1 failed b",
	}, summary, "history folded, sorted by ID, a dropped, pending kept, other queue kept")

	// The output is sorted and a second compaction has nothing to do.
	f, err := openLocalParquet(tc.Output, outbox.TableDispatch)
	require.NoError(t, err)
	var ids []string
	require.NoError(t, f.scan(func(r outbox.Record) error { ids = append(ids, r.ID); return nil }))
	f.close()
	require.Equal(t, []string{"dispatch:r1:b:1", "dispatch:r1:c:1", "dispatch:r1:z:1"}, ids)
	st, err = a.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}})
	require.NoError(t, err)
	require.Equal(t, "", st.Tables[0].Output)

	// Retention 0 drops every terminal record, never a pending one.
	st, err = a.compact(ctx, CompactConfig{Retention: Retention{"*": 0}})
	require.NoError(t, err)
	require.Equal(t, int64(2), st.Tables[0].Dropped)
	got, err = a.Lookup(ctx, outbox.Query{RunID: "r1"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, outbox.StatusPending, got[0].Status)
}

func TestCompactInterruptedLeavesInputs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := setup(t)
	o := b.open(t, procA)
	for i := range 3 {
		for j := range 3000 {
			require.NoError(t, o.Append(ctx, dispatchRec("r", fmt.Sprint(j), fmt.Sprint(i), outbox.StatusCreated), nil))
		}
		require.NoError(t, o.Flush(ctx))
	}
	dir := filepath.Join(b.root, string(outbox.TableDispatch))
	before, _ := filepath.Glob(filepath.Join(dir, "*"))
	_, err := o.compact(ctx, CompactConfig{Full: true, Trace: &CompactTrace{Progress: func(_ outbox.Table, done, _ int64) {
		if done > 3000 {
			cancel()
		}
	}}})
	require.ErrorIs(t, err, context.Canceled)
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, filepath.Join(dir, e.Name()))
	}
	require.Equal(t, before, names, "inputs untouched, no temporary left")
}

func TestCompactWhileAppending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o := b.open(t, procA)
	c, err := Open(ctx, Config{Root: b.root, ReadOnly: true})
	require.NoError(t, err)
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 400 {
			if err := outbox.AppendAndWait(ctx, o, dispatchRec("r", fmt.Sprint(i), "1", outbox.StatusCreated)); err != nil {
				errs <- err
				return
			}
			if i%50 == 0 {
				if err := o.Flush(ctx); err != nil {
					errs <- err
					return
				}
			}
		}
	}()
	for range 5 {
		_, err := c.compact(ctx, CompactConfig{})
		require.NoError(t, err)
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)
	require.NoError(t, o.Flush(ctx))
	_, err = c.compact(ctx, CompactConfig{})
	require.NoError(t, err)
	got, err := c.Lookup(ctx, outbox.Query{RunID: "r"})
	require.NoError(t, err)
	require.Len(t, got, 400)
	require.Empty(t, c.Damaged())
}

func TestStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	a := b.open(t, procA)
	bb := b.open(t, procB)
	require.NoError(t, outbox.AppendAndWait(ctx, a, dispatchRec("r", "x", "1", outbox.StatusPending)))
	require.NoError(t, outbox.AppendAndWait(ctx, a, dispatchRec("r", "y", "1", outbox.StatusPending)))
	require.NoError(t, a.Flush(ctx))
	b.clock.Advance(time.Second)
	require.NoError(t, outbox.AppendAndWait(ctx, bb, dispatchRec("r", "x", "1", outbox.StatusCreated)))
	require.NoError(t, outbox.AppendAndWait(ctx, bb, timerRec("r", "x", t0, outbox.StatusCreated)))
	st, err := a.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, st, 3)
	require.Equal(t, TableStats{Table: outbox.TableDeliveries, ByStatus: map[string]int64{}, ByQueue: map[string]int64{},
		ByKind: map[string]int64{}, ByProcessor: map[string]int64{}, Skipped: []*FileError{}}, st[2], "a dispatcher's outbox has no deliveries")
	d := st[0]
	require.Equal(t, outbox.TableDispatch, d.Table)
	require.Equal(t, 1, d.Files)
	require.Equal(t, int64(2), d.Rows)
	require.Equal(t, int64(1), d.LogRecords)
	require.Equal(t, int64(2), d.IDs)
	require.Equal(t, map[string]int64{"pending": 1, "created": 1}, d.ByStatus)
	require.Equal(t, map[string]int64{procA: 1, procB: 1}, d.ByProcessor)
	require.Equal(t, map[string]int64{"dispatch": 2}, d.ByKind)
	require.Equal(t, map[string]int64{"heartbeat": 1}, st[1].ByKind)
}
