package pgbox_test

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

func pendingRecord(t *testing.T, task string, version int64) outbox.Record {
	t.Helper()
	id, err := naming.NewDispatch("claims", task, naming.Attempt(1))
	require.NoError(t, err)
	r := outbox.RecordOf(id)
	r.Queue, r.Status, r.Version = "projects/p/locations/l/queues/q", outbox.StatusPending, version
	return r
}

func ids(recs []outbox.Record) []string {
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

// Two recovering processes claim stale records at once: each gets its own,
// together all of them; a claim holds off a third claimer until it
// expires; a verdict is kept only over the version its writer read.
func TestClaimPendingSharesTheWork(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	boxes := openTwice(t, db, clock)
	a, b := boxes[0], boxes[1]

	var all []string
	for i := range 40 {
		r := pendingRecord(t, fmt.Sprintf("t%02d", i), 1)
		require.NoError(t, outbox.AppendAndWait(t.Context(), a, r))
		all = append(all, r.ID)
	}
	clock.Advance(time.Minute)
	fresh := pendingRecord(t, "fresh", 1)
	require.NoError(t, outbox.AppendAndWait(t.Context(), a, fresh))

	var got [2][]outbox.Record
	var wg sync.WaitGroup
	for i, box := range boxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs, err := box.ClaimPending(t.Context(), outbox.TableDispatch, 30*time.Second, time.Minute)
			if err != nil {
				t.Error(err)
			}
			got[i] = recs
		}()
	}
	wg.Wait()
	union := append(ids(got[0]), ids(got[1])...)
	sort.Strings(union)
	require.Equal(t, all, union, "every stale record claimed once, the fresh one not at all")

	again, err := b.ClaimPending(t.Context(), outbox.TableDispatch, 30*time.Second, time.Minute)
	require.NoError(t, err)
	require.Empty(t, again, "claims hold until they expire")
	pending, err := b.Pending(t.Context(), outbox.TableDispatch, 30*time.Second)
	require.NoError(t, err)
	require.Len(t, pending, 40, "Pending still lists claimed records")

	// A dispatcher finishes one record meanwhile: the recoverer that read
	// version 1 has its verdict refused and sees the dispatcher's.
	first := append(got[0], got[1]...)[0]
	done := first
	done.Status, done.Version, done.UpdatedAt = outbox.StatusCreated, 2, time.Time{}
	require.NoError(t, outbox.AppendAndWait(t.Context(), b, done))
	verdict := first
	verdict.Status, verdict.Version, verdict.UpdatedAt = outbox.StatusNotFound, 2, time.Time{}
	err = outbox.AppendAndWait(t.Context(), a, verdict)
	var vc *outbox.VersionConflictError
	require.ErrorAs(t, err, &vc)
	require.Equal(t, outbox.StatusCreated, vc.Current.Status)

	clock.Advance(time.Minute)
	expired, err := b.ClaimPending(t.Context(), outbox.TableDispatch, 30*time.Second, time.Minute)
	require.NoError(t, err)
	require.Len(t, expired, 40, "after the claims expired: the 39 left and the one now stale")
	require.NotContains(t, ids(expired), first.ID, "a finished record is no longer pending")
	require.Contains(t, ids(expired), fresh.ID)

	none, err := a.ClaimPending(t.Context(), outbox.TableDeliveries, 0, time.Minute)
	require.NoError(t, err)
	require.Empty(t, none, "nothing re-drives a delivery")
	_, err = a.ClaimPending(t.Context(), outbox.TableDispatch, 0, 0)
	var ce *pgbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "claimFor", ce.Field)
}
