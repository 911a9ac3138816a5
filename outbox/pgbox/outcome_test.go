package pgbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// An outcome appended over an intent that a later transaction replaced
// releases the replacement in the same statement, and that statement
// wakes the listening relays, as DropIntent's release does: the
// replacement need not wait for anyone's poll. The notify gap is an hour,
// so the replacing transaction itself sends none and the only notification
// after the first is the release's. About 1 s.
func TestAppendOutcomeReleaseNotifies(t *testing.T) {
	t.Parallel()
	w := newTxWorld(t, clockwork.NewRealClock())
	w.opts.NotifyGap = time.Hour
	box, err := pgbox.New(w.db, w.opts)
	require.NoError(t, err)
	writer, _ := w.dispatcher(t, cloudtasks.Config{NoRelay: true})

	heard := make(chan string, 10)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go w.listener(t).Listen(ctx, box.NoticeChannel(), func(p string) { heard <- p }) //nolint:errcheck // ends with ctx
	await := func(payload string) {
		t.Helper()
		select {
		case p := <-heard:
			require.Equal(t, payload, p)
		case <-time.After(time.Minute):
			t.Fatalf("no notification %q within a minute", payload)
		}
	}
	await("") // listening

	ids := commitIntents(t, w.db, writer, "replaced")
	await(outbox.NoticeIntents)
	claimed, err := box.ClaimIntents(t.Context(), []string{txQueue}, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	pending, ok, err := box.Latest(t.Context(), outbox.TableDispatch, ids[0])
	require.NoError(t, err)
	require.True(t, ok)

	// The same ID again in a later transaction, after a failure recorded
	// meanwhile: a new pending version and intent replace the claimed one.
	failed := pending
	failed.Follow(&pending, time.Now())
	failed.Status, failed.ErrorCode = outbox.StatusFailed, "INVALID_ARGUMENT"
	require.NoError(t, outbox.AppendAndWait(t.Context(), box, failed))
	commitIntents(t, w.db, writer, "replaced")
	select {
	case p := <-heard:
		t.Fatalf("the replacing transaction notified %q within the gap", p)
	default:
	}

	out := pending
	out.Follow(&pending, time.Now())
	out.Status = outbox.StatusCreated
	var vc *outbox.VersionConflictError
	require.ErrorAs(t, box.AppendOutcome(t.Context(), out, claimed[0]), &vc)
	await(outbox.NoticeIntents)
	next, err := box.ClaimIntents(t.Context(), []string{txQueue}, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, next, 1)
	require.Equal(t, []any{ids[0], int64(3)}, []any{next[0].ID, next[0].Version})
}
