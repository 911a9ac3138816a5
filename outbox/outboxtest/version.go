package outboxtest

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// RunVersions runs the conformance tests of conditional appends (a record
// with a Version above 0), each in its own subtest with a new store from
// newStore, as Run does.
func RunVersions(t *testing.T, newStore func(t *testing.T, clock clockwork.Clock) outbox.Outbox) {
	for _, tc := range versionTests {
		t.Run(tc.name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(T0)
			tc.run(t, &bundle{ctx: t.Context(), clock: clock, s: newStore(t, clock)})
		})
	}
}

// appendVersion appends r at version v and returns Append's error.
func (b *bundle) appendVersion(r outbox.Record, v int64) error {
	r.Version = v
	return outbox.AppendAndWait(b.ctx, b.s, r)
}

var versionTests = []struct {
	name string
	run  func(t *testing.T, b *bundle)
}{
	{"ConflictRefusedWithTheCurrentRecord", func(t *testing.T, b *bundle) {
		r := dispatch("v", "t", "1", outbox.StatusPending)
		require.NoError(t, b.appendVersion(r, 1))
		b.clock.Advance(time.Second)
		won := r
		won.Status = outbox.StatusCreated
		require.NoError(t, b.appendVersion(won, 2))
		for _, c := range []struct {
			name    string
			version int64
		}{{"the same version", 2}, {"an older version", 1}} {
			lost := r
			lost.Status = outbox.StatusFailed
			err := b.appendVersion(lost, c.version)
			require.ErrorIs(t, err, outbox.ErrVersionConflict, c.name)
			var vc *outbox.VersionConflictError
			require.ErrorAs(t, err, &vc, c.name)
			require.Equal(t, c.version, vc.Version, c.name)
			require.Equal(t, int64(2), vc.Current.Version, c.name)
			require.Equal(t, outbox.StatusCreated, vc.Current.Status, c.name)
			require.Equal(t, T0.Add(time.Second), vc.Current.UpdatedAt, c.name)
		}
		latest := b.latest(t, outbox.TableDispatch, r.ID)
		require.Equal(t, outbox.StatusCreated, latest.Status, "Latest after a conflict returns the winner")
		require.Equal(t, int64(2), latest.Version)
		hist, err := b.s.Lookup(b.ctx, outbox.Query{ID: r.ID, History: true})
		require.NoError(t, err)
		require.Len(t, hist, 2, "a refused record leaves nothing behind")
	}},
	{"VersionsAreKeptPerTableAndID", func(t *testing.T, b *bundle) {
		a := dispatch("v", "a", "1", outbox.StatusPending)
		other := dispatch("v", "b", "1", outbox.StatusPending)
		require.NoError(t, b.appendVersion(a, 1))
		require.NoError(t, b.appendVersion(other, 1), "another ID has versions of its own")
		timer := outbox.RecordOf(mustRetryTimer(t))
		timer.Queue, timer.Status = queue, outbox.StatusPending
		require.NoError(t, b.appendVersion(timer, 1), "another table has versions of its own")
		require.Equal(t, int64(1), b.latest(t, outbox.TableDispatch, a.ID).Version)
	}},
	{"VersionZeroIsUnconditional", func(t *testing.T, b *bundle) {
		r := dispatch("v", "t", "1", outbox.StatusPending)
		require.NoError(t, b.appendVersion(r, 0))
		require.NoError(t, b.appendVersion(r, 0))
		require.NoError(t, b.appendVersion(r, 1), "the first versioned record over unversioned ones")
		hist, err := b.s.Lookup(b.ctx, outbox.Query{ID: r.ID, History: true})
		require.NoError(t, err)
		var versions []int64
		for _, h := range hist {
			versions = append(versions, h.Version)
		}
		require.Equal(t, []int64{0, 0, 1}, versions)
	}},
	{"HigherVersionWinsOverALaterUpdatedAt", func(t *testing.T, b *bundle) {
		// A writer whose clock is behind still supersedes what it read.
		r := dispatch("v", "t", "1", outbox.StatusPending)
		r.UpdatedAt = T0.Add(time.Hour)
		require.NoError(t, b.appendVersion(r, 1))
		next := r
		next.Status, next.UpdatedAt = outbox.StatusCreated, T0
		require.NoError(t, b.appendVersion(next, 2))
		latest := b.latest(t, outbox.TableDispatch, r.ID)
		require.Equal(t, outbox.StatusCreated, latest.Status)
		require.Equal(t, int64(2), latest.Version)
	}},
	{"LatestFreshAgreesWithLatest", func(t *testing.T, b *bundle) {
		fr, ok := b.s.(outbox.FreshReader)
		if !ok {
			t.Skip("the store's Latest sees every kept record: it is no FreshReader")
		}
		r := dispatch("v", "t", "1", outbox.StatusPending)
		require.NoError(t, b.appendVersion(r, 1))
		r.Status = outbox.StatusCreated
		require.NoError(t, b.appendVersion(r, 2))
		got, found, unseen, err := fr.LatestFresh(b.ctx, outbox.TableDispatch, r.ID)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, b.latest(t, outbox.TableDispatch, r.ID), got)
		require.GreaterOrEqual(t, unseen, time.Duration(0))
		_, found, _, err = fr.LatestFresh(b.ctx, outbox.TableDispatch, "dispatch:v:t:2")
		require.NoError(t, err)
		require.False(t, found)
	}},
	{"AnnouncementReadsBack", func(t *testing.T, b *bundle) {
		a, ok := b.s.(outbox.Announcer)
		if !ok {
			t.Skip("no process writes an ID's first record blind of another: no Announcer")
		}
		me := outbox.Process{ProcessorUUID: b.s.ProcessorUUID(), DefaultQueue: "projects/p/locations/l/queues/q"}
		require.NoError(t, a.Announce(b.ctx, me))
		me.DefaultQueue = "projects/p/locations/l/queues/r"
		require.NoError(t, a.Announce(b.ctx, me))
		got, err := a.Announced(b.ctx)
		require.NoError(t, err)
		require.Equal(t, []outbox.Process{me}, got)
	}},
	{"NegativeVersionRefused", func(t *testing.T, b *bundle) {
		err := b.appendVersion(dispatch("v", "t", "1", outbox.StatusPending), -1)
		var re *outbox.RecordError
		require.ErrorAs(t, err, &re)
		require.Equal(t, "Version", re.Field)
	}},
}

func mustRetryTimer(t *testing.T) naming.ID {
	t.Helper()
	id, err := naming.NewRetryTimer("v", "a", naming.Attempt(1), T0.Add(time.Hour))
	require.NoError(t, err)
	return id
}
