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
	b, a, bb := staleB(t)
	rec := writeBlind(t, b, a, bb, outbox.StatusCancelled)

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

// Blind writes of one version that agree the task was made (A's created,
// B's pending written later by its clock) read the same everywhere:
// Latest, Lookup, Pending and a compacted file all answer created, so
// Recover never lists the ID. A conflict that does not agree survives
// compaction as a conflict.
func TestBlindWritesReadTheSameAcrossReadsAndCompaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		first    outbox.Status // A's write
		want     outbox.Status // what every read answers
		conflict bool
	}{
		{"agreeing", outbox.StatusCreated, outbox.StatusCreated, false},
		{"conflicting", outbox.StatusCancelled, outbox.StatusPending, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, a, bb := staleB(t)
			rec := writeBlind(t, b, a, bb, tc.first)
			b.clock.Advance(time.Hour)

			check := func(stage string) {
				got, ok, err := a.Latest(ctx, outbox.TableTimers, rec.ID)
				require.True(t, ok, stage)
				require.Equal(t, tc.want, got.Status, stage)
				if tc.conflict {
					require.ErrorIs(t, err, outbox.ErrConcurrentWrites, stage)
				} else {
					require.NoError(t, err, stage)
				}
				recs, err := a.Lookup(ctx, outbox.Query{ID: rec.ID})
				require.NoError(t, err, stage)
				require.Len(t, recs, 1, stage)
				require.Equal(t, tc.want, recs[0].Status, stage)
				pending, err := a.Pending(ctx, outbox.TableTimers, 0)
				require.NoError(t, err, stage)
				var ids []string
				for _, p := range pending {
					ids = append(ids, p.ID)
				}
				if tc.want == outbox.StatusPending {
					require.Equal(t, []string{rec.ID}, ids, stage)
				} else {
					require.Empty(t, ids, stage+": Pending agrees with Latest")
				}
			}
			check("in the logs")
			require.NoError(t, a.Flush(ctx))
			require.NoError(t, bb.Flush(ctx))
			check("in files")
			require.NoError(t, a.Compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableTimers}, Full: true}))
			check("compacted")
			hist, err := a.Lookup(ctx, outbox.Query{ID: rec.ID, History: true})
			require.NoError(t, err)
			var states []string
			for _, r := range hist {
				states = append(states, string(r.Status))
			}
			if tc.conflict {
				require.ElementsMatch(t, []string{"cancelled", "pending"}, states, "both sides of a conflict are kept")
			} else {
				require.Equal(t, []string{"created"}, states, "the pending beside the created is folded away")
			}
		})
	}
}

// staleB opens A and a process B whose view of others is reused for an
// hour: B writes blind of what A writes after B's first read.
func staleB(t *testing.T) (b *testBundle, a, bb *Outbox) {
	t.Helper()
	b = setup(t)
	a = b.open(t, procA)
	opts := b.options(procB)
	opts.RefreshInterval = time.Hour
	bb, err := Open(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { bb.Close() })
	return b, a, bb
}

// writeBlind has A write rec with status first, then B (which read the ID
// before A wrote) write rec as pending, both as version 1 and B later by
// the clock. It returns B's record.
func writeBlind(t *testing.T, b *testBundle, a, bb *Outbox, first outbox.Status) outbox.Record {
	t.Helper()
	ctx := context.Background()
	rec := timerRec("r", "t", t0.Add(time.Hour), outbox.StatusPending)
	_, ok, err := bb.Latest(ctx, outbox.TableTimers, rec.ID) // B's view is taken now
	require.NoError(t, err)
	require.False(t, ok)
	ar := rec
	ar.Status = first
	ar.Follow(nil, b.clock.Now())
	require.NoError(t, outbox.AppendAndWait(ctx, a, ar))
	rec.Follow(nil, b.clock.Now().Add(time.Millisecond))
	require.NoError(t, outbox.AppendAndWait(ctx, bb, rec), "B cannot see A's write yet")
	return rec
}
