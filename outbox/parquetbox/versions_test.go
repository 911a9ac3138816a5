package parquetbox

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// A version another process wrote is refused, whether its record is in
// that process's log or already in a Parquet file, and the refusal
// carries the winner; this process's own earlier version is refused by
// the writer.
func TestAppendRefusesAVersionAnotherProcessWrote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, flushed := range []bool{false, true} {
		b := setup(t)
		a, bb := b.open(t, procA), b.open(t, procB)
		won := timerRec("r", "t", t0.Add(time.Hour), outbox.StatusCancelled)
		won.Follow(nil, b.clock.Now())
		require.NoError(t, outbox.AppendAndWait(ctx, a, won))
		if flushed {
			require.NoError(t, a.Flush(ctx))
		}
		stored, ok, err := bb.Latest(ctx, outbox.TableTimers, won.ID)
		require.NoError(t, err)
		require.True(t, ok)

		lost := timerRec("r", "t", t0.Add(time.Hour), outbox.StatusPending)
		lost.Follow(nil, b.clock.Now())
		err = outbox.AppendAndWait(ctx, bb, lost)
		var vc *outbox.VersionConflictError
		require.ErrorAs(t, err, &vc, "flushed=%v", flushed)
		require.Equal(t, stored, vc.Current)
		require.Equal(t, procA, vc.Current.ProcessorUUID)

		again := won
		again.Status = outbox.StatusCreated
		err = outbox.AppendAndWait(ctx, a, again)
		require.ErrorIs(t, err, outbox.ErrVersionConflict, "A's own version 1 is held")

		next := lost
		next.Follow(&stored, b.clock.Now())
		require.NoError(t, outbox.AppendAndWait(ctx, bb, next))
		got, _, err := a.Latest(ctx, outbox.TableTimers, won.ID)
		require.NoError(t, err)
		require.Equal(t, int64(2), got.Version)
		require.Equal(t, procB, got.ProcessorUUID, "A reads B's later version, not its own record")
	}
}

// Two processes that write the same version without seeing each other
// (here B's view of others is an hour stale) leave two records no rule
// orders: a reader says so instead of picking one.
func TestLatestReportsBlindConcurrentWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	a := b.open(t, procA)
	opts := b.options(procB)
	opts.RefreshInterval = time.Hour
	bb, err := Open(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { bb.Close() })

	rec := timerRec("r", "t", t0.Add(time.Hour), outbox.StatusPending)
	_, ok, err := bb.Latest(ctx, outbox.TableTimers, rec.ID) // B's view is taken now
	require.NoError(t, err)
	require.False(t, ok)

	cancel := rec
	cancel.Status = outbox.StatusCancelled
	cancel.Follow(nil, b.clock.Now())
	require.NoError(t, outbox.AppendAndWait(ctx, a, cancel))
	rec.Follow(nil, b.clock.Now().Add(time.Millisecond))
	require.NoError(t, outbox.AppendAndWait(ctx, bb, rec), "B cannot see A's write yet")

	got, ok, err := a.Latest(ctx, outbox.TableTimers, rec.ID)
	require.True(t, ok)
	var cw *outbox.ConcurrentWritesError
	require.ErrorAs(t, err, &cw)
	require.Equal(t, outbox.StatusPending, got.Status, "the newest by Newer comes with the error")
	var states []string
	for _, r := range cw.Records {
		states = append(states, string(r.Status)+" by "+r.ProcessorUUID)
	}
	require.Equal(t, []string{"cancelled by " + procA, "pending by " + procB}, states)
}
