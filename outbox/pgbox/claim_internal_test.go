package pgbox

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// A claim whose answer was lost (the database crashed, or the connection
// dropped, after it committed) is taken back by the next ClaimIntents of
// the same outbox at once, and by no other outbox before it expires; a
// lost claim that has expired is forgotten. The loss itself cannot be
// timed from a test, so the test notes it as ClaimIntents does on an
// error. About 1 s.
func TestALostClaimIsTakenBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC))
	db := pgtest.Open(t)
	opts := Config{Schema: "lost", Clock: clock}
	o, err := New(db, opts)
	require.NoError(t, err)
	other, err := New(db, opts)
	require.NoError(t, err)
	require.NoError(t, o.Migrate(ctx))
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	const queue = "projects/p/locations/l/queues/q"
	require.NoError(t, o.AppendCancel(ctx, SQLTx(tx), outbox.Intent{Delete: true, Table: outbox.TableDispatch, ID: "dispatch:r:k:1", Queue: queue}))
	require.NoError(t, tx.Commit())

	got, err := o.ClaimIntents(ctx, []string{queue}, 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, got, 1)
	o.lostClaims.add(clock.Now().Add(time.Hour).Truncate(time.Microsecond)) // as if its answer had not arrived

	got, err = other.ClaimIntents(ctx, []string{queue}, 10, time.Hour)
	require.NoError(t, err)
	require.Empty(t, got, "another processor waits for the claim")
	clock.Advance(time.Minute)
	got, err = o.ClaimIntents(ctx, []string{queue}, 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, got, 1, "taken back at once")
	got, err = o.ClaimIntents(ctx, []string{queue}, 10, time.Hour)
	require.NoError(t, err)
	require.Empty(t, got, "the claim taken back is an ordinary claim again")

	clock.Advance(time.Hour)
	require.Empty(t, o.lostClaims.after(clock.Now()), "expired: forgotten")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = o.ClaimIntents(cancelled, []string{queue}, 10, time.Hour)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []time.Time{clock.Now().Add(time.Hour).Truncate(time.Microsecond)}, o.lostClaims.after(clock.Now()), "a failed claim is noted")
}
