package parquetbox

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// A writer busy all day at the default publish interval leaves at most
// ⌈24h / PublishInterval⌉ files in the day's partition (2,880), however
// many records it writes in between, and a compaction folds them into one.
// The day is simulated on the fake clock: three dispatches (pending, then
// created) every 30 s.
//
// Time budget: about 10 s on 2 cores (2,880 small Parquet files written,
// then folded).
func TestPublishIntervalBoundsFilesPerPartitionOverADay(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 2,880 files; skipped with -short")
	}
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	b.clock = clockwork.NewFakeClockAt(day)
	opts := b.options(procA)
	opts.Durability = Interval // the test measures files, not fsyncs
	o, err := Open(ctx, opts)
	require.NoError(t, err)
	defer o.Close()

	const bound = int(24 * time.Hour / DefaultPublishInterval)
	require.Equal(t, 2880, bound)
	ids := 0
	for range bound {
		for range 3 {
			r := dispatchRec("busy", fmt.Sprintf("t%05d", ids), "1", outbox.StatusPending)
			require.NoError(t, outbox.AppendAndWait(ctx, o, r))
			r.Status = outbox.StatusCreated
			require.NoError(t, outbox.AppendAndWait(ctx, o, r))
			ids++
		}
		// The appends armed the publish timer (or met one that fired
		// and is still to be handled, which seals them the same).
		b.clock.Advance(DefaultPublishInterval)
	}
	require.NoError(t, o.Close())

	partition := filepath.Join(b.root, string(outbox.TableDispatch), "created_date=2026-03-02")
	files, err := filepath.Glob(filepath.Join(partition, "*.parquet"))
	require.NoError(t, err)
	require.LessOrEqual(t, len(files), bound)
	require.Greater(t, len(files), bound/2, "most intervals were published on their tick, not all at Close")
	t.Logf("%d files in the partition after a simulated day (bound %d)", len(files), bound)

	ro := b.options("")
	ro.ReadOnly = true
	r, err := Open(ctx, ro)
	require.NoError(t, err)
	defer r.Close()
	st, err := r.Compact(ctx, CompactOptions{Tables: []outbox.Table{outbox.TableDispatch}, Full: true})
	require.NoError(t, err)
	// A full fold of 2,880 runs merges at most 48 at a time, so it reads
	// some rows more than once.
	require.GreaterOrEqual(t, st.Tables[0].RowsIn, int64(2*ids))
	latest, err := r.Lookup(ctx, outbox.Query{Table: outbox.TableDispatch, RunID: "busy"})
	require.NoError(t, err)
	require.Len(t, latest, ids, "one latest state per ID")
	files, err = filepath.Glob(filepath.Join(partition, "*.parquet"))
	require.NoError(t, err)
	require.Len(t, files, 1)
}
