package parquetbox

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/ctdispatch/ctdispatch/outbox/internal/bucket"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// A writer busy all day leaves at most Buckets × (⌈24h / PublishInterval⌉
// + 1) files in the day's partition: each publication writes one file per
// bucket of each partition it touched, the timer publishes at most once
// per interval, and one more publication, after midnight, carries the
// day's last records. At the defaults that is 8 × 2,881 = 23,048 files.
// The day is simulated at the default bucket count with a 10-minute
// interval (8 × 145 = 1,160): at 30 s it writes 23,000 files, takes
// minutes under -race, and a compaction holds every file of the table
// open at once, past the descriptors some machines allow. On the fake clock, from 5 minutes before midnight, one
// dispatch (pending, then created) in each bucket every 5 minutes, so the
// day's first publication carries the day before's records too and its
// last one comes after midnight: the bound is reached exactly. Once the
// day is over, a compaction brings each bucket back to one run.
//
// Time budget: about 15 s on 2 cores (2,300 small Parquet files written,
// then folded).
func TestPublishIntervalBoundsFilesPerPartitionOverADay(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 2,300 files; skipped with -short")
	}
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	const interval = 10 * time.Minute
	b.clock = clockwork.NewFakeClockAt(day.Add(-interval / 2))
	opts := b.options(procA)
	opts.Buckets = 0 // the default
	opts.PublishInterval = interval
	opts.Durability = Interval // the test measures files, not fsyncs
	o, err := Open(ctx, opts)
	require.NoError(t, err)
	defer o.Close()
	buckets := o.opts.Buckets
	require.Equal(t, 8, buckets)
	boundAt := func(interval time.Duration) int {
		return buckets * (int((24*time.Hour+interval-1)/interval) + 1)
	}
	require.Equal(t, 23048, boundAt(DefaultPublishInterval), "the bound docs/outbox.md states")
	bound := boundAt(interval)
	require.Equal(t, 1160, bound)

	// taskIn returns a task not used before whose dispatches fall in
	// bucket k.
	next := 0
	taskIn := func(k int) string {
		for {
			task := fmt.Sprintf("t%06d", next)
			next++
			if bucket.Of(dispatchRec("busy", task, "1", "").ID, buckets) == k {
				return task
			}
		}
	}
	ids := 0
	for !b.clock.Now().After(day.Add(24*time.Hour + interval)) {
		if b.clock.Now().Format(time.DateOnly) == "2026-03-02" {
			ids += buckets
		}
		for k := range buckets {
			r := dispatchRec("busy", taskIn(k), "1", outbox.StatusPending)
			require.NoError(t, outbox.AppendAndWait(ctx, o, r))
			r.Status = outbox.StatusCreated
			require.NoError(t, outbox.AppendAndWait(ctx, o, r))
		}
		// The appends armed the publish timer (or met one that fired
		// and is still to be handled, which seals them the same).
		b.clock.Advance(interval / 2)
	}
	require.NoError(t, o.Close())

	partition := filepath.Join(b.root, string(outbox.TableDispatch), "created_date=2026-03-02")
	files, err := filepath.Glob(filepath.Join(partition, "*.parquet"))
	require.NoError(t, err)
	perBucket := map[string]int{}
	for _, f := range files {
		k, n, _, ok := splitBucket(filepath.Base(f))
		require.True(t, ok, f)
		require.Equal(t, buckets, n, f)
		perBucket[bucket.Name(k, n)]++
	}
	require.Len(t, perBucket, buckets)
	for unit, n := range perBucket {
		require.LessOrEqual(t, n, bound/buckets, unit)
	}
	require.LessOrEqual(t, len(files), bound)
	require.Greater(t, len(files), bound/2, "most intervals were published on their tick, not all at Close")
	t.Logf("%d files in the partition after a simulated day (bound %d)", len(files), bound)

	// The day is over: a compaction, not a full one, folds each bucket
	// whole, as it holds more than ⌈log₄ runs⌉ + 1 runs.
	ro := b.options("")
	ro.ReadOnly = true
	r, err := Open(ctx, ro)
	require.NoError(t, err)
	defer r.Close()
	st, err := r.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}})
	require.NoError(t, err)
	folded := 0
	for _, p := range st.Tables[0].Partitions {
		if p.Partition == "created_date=2026-03-02" {
			require.Equal(t, []any{UnitCompacted, true, 1}, []any{p.Action, p.Full, p.RunsAfter}, "%+v", p)
			folded++
		}
	}
	require.Equal(t, buckets, folded)
	latest, err := r.Lookup(ctx, outbox.Query{Table: outbox.TableDispatch, RunID: "busy"})
	require.NoError(t, err)
	onDay := 0
	for _, rec := range latest {
		require.Equal(t, outbox.StatusCreated, rec.Status, rec.ID)
		if rec.CreatedAt.Format(time.DateOnly) == "2026-03-02" {
			onDay++
		}
	}
	require.Equal(t, ids, onDay, "one latest state per ID")
	files, err = filepath.Glob(filepath.Join(partition, "*.parquet"))
	require.NoError(t, err)
	require.Len(t, files, buckets, "one file per bucket")
}
