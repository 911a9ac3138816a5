package cloudtasks_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// The transactional path and the relay over outbox.Memory, whose
// transactions stand for a database's: the same behaviours run against
// PostgreSQL through the conformance suite (outboxtest.RunIntents), which
// holds both stores to what these tests rely on.

// txWorld is an emulator and a Memory outbox for dispatchers that record
// inside transactions, with a count of the CreateTask calls that reach
// the emulator.
type txWorld struct {
	emu   *emulator.Server
	clock clockwork.Clock
	box   *outbox.Memory
	calls atomic.Int64
}

func newTxWorld(t *testing.T, clock clockwork.Clock) *txWorld {
	t.Helper()
	return &txWorld{emu: startEmulator(t, clock), clock: clock, box: outbox.NewMemory(clock)}
}

// countingClient counts the CreateTask calls of a dispatcher.
type countingClient struct {
	cloudtasks.Client
	n *atomic.Int64
}

func (c countingClient) CreateTask(ctx context.Context, req *cloudtaskspb.CreateTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error) {
	c.n.Add(1)
	return c.Client.CreateTask(ctx, req, opts...)
}

// dispatcher returns a dispatcher over the world's Memory, configured by
// cfg's relay, durability and retry fields.
func (w *txWorld) dispatcher(t *testing.T, cfg cloudtasks.Config) *cloudtasks.Dispatcher {
	t.Helper()
	c, err := w.emu.NewClient(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	cfg.Project, cfg.Location, cfg.Queue, cfg.Clock = "proj", "europe-west1", "default", w.clock
	cfg.Client = countingClient{Client: c, n: &w.calls}
	d, err := cloudtasks.NewDispatcher(context.Background(), w.box, &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
	return d
}

// inTx runs fn in a transaction of the world's Memory and commits it, or
// rolls it back when commit is false.
func (w *txWorld) inTx(t *testing.T, commit bool, fn func(tx outbox.Tx)) {
	t.Helper()
	tx := w.box.Begin()
	fn(tx)
	if commit {
		require.NoError(t, tx.Commit())
	} else {
		require.NoError(t, tx.Rollback())
	}
}

func txRequest(key, body string) cloudtasks.DispatchRequest {
	return cloudtasks.DispatchRequest{RunID: "tx", TaskKey: key, Identity: naming.Attempt(1),
		Task: cloudtasks.Task{URL: "https://worker.example/run", Body: []byte(body)}}
}

// txHistory gives an ID's history as "v<version> <status>".
func txHistory(t *testing.T, box outbox.Outbox, id string) []string {
	t.Helper()
	hist, err := box.Lookup(context.Background(), outbox.Query{ID: id, History: true})
	require.NoError(t, err)
	out := make([]string, len(hist))
	for i, r := range hist {
		out[i] = fmt.Sprintf("v%d %s", r.Version, r.Status)
	}
	return out
}

// A dispatch recorded in a transaction that rolls back leaves no record
// and no intent, and no relay ever creates its task; the same dispatch
// committed is created once, by the relay, after the commit.
func TestDispatchTxRolledBackNeverCreated(t *testing.T) {
	t.Parallel()
	w := newTxWorld(t, clockwork.NewFakeClockAt(t0))
	d := w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	ctx := context.Background()

	w.inTx(t, false, func(tx outbox.Tx) {
		res, err := d.DispatchTx(ctx, tx, txRequest("rolled-back", "b"))
		require.NoError(t, err)
		require.Equal(t, cloudtasks.OutcomeQueued, res.Outcome)
		require.Zero(t, w.calls.Load(), "nothing is created inside the transaction")
	})
	st, err := d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{}, st, "a rolled-back transaction leaves no intent")
	require.Zero(t, w.emu.TaskCount())
	require.Zero(t, w.calls.Load())
	_, ok, err := d.Latest(ctx, "dispatch:tx:rolled-back:1")
	require.NoError(t, err)
	require.False(t, ok, "nor a record")
	_, err = d.WaitOutcome(ctx, "dispatch:tx:rolled-back:1")
	require.ErrorIs(t, err, cloudtasks.ErrInvalidRequest)
	require.ErrorContains(t, err, "has no record")

	w.inTx(t, true, func(tx outbox.Tx) {
		_, err := d.DispatchTx(ctx, tx, txRequest("rolled-back", "b"))
		require.NoError(t, err)
	})
	st, err = d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{Claimed: 1, Created: 1}, st)
	rec, err := d.WaitOutcome(ctx, "dispatch:tx:rolled-back:1")
	require.NoError(t, err)
	require.Equal(t, outbox.StatusCreated, rec.Status)
	require.Equal(t, int32(1), rec.CreateCalls)
	require.Equal(t, int64(1), w.calls.Load())
	st, err = d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{}, st, "the finished intent is gone")
}

// Two dispatchers on one outbox, each with its own running relay, race
// over 100 committed intents while a caller waits for every outcome: each
// task is created by exactly one CreateTask call, and each ID's history
// is pending then created, once.
func TestDispatchTxCommittedCreatedOnceByRacingRelays(t *testing.T) {
	t.Parallel()
	const n = 100
	w := newTxWorld(t, clockwork.NewRealClock())
	cfg := cloudtasks.Config{RelayInterval: 5 * time.Millisecond}
	d0, d1 := w.dispatcher(t, cfg), w.dispatcher(t, cfg)
	ctx := context.Background()

	for i := range n {
		w.inTx(t, true, func(tx outbox.Tx) {
			res, err := d0.DispatchTx(ctx, tx, txRequest(fmt.Sprintf("t%03d", i), fmt.Sprint(i)))
			require.NoError(t, err)
			require.Equal(t, cloudtasks.OutcomeQueued, res.Outcome)
		})
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waiter := []*cloudtasks.Dispatcher{d0, d1}[i%2]
			rec, err := waiter.WaitOutcome(ctx, fmt.Sprintf("dispatch:tx:t%03d:1", i))
			if err != nil {
				t.Error(err)
				return
			}
			if rec.Status != outbox.StatusCreated {
				t.Errorf("%s: status %s, want created", rec.ID, rec.Status)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, n, w.emu.TaskCount())
	require.Equal(t, int64(n), w.calls.Load(), "one CreateTask call per task")
	for i := range n {
		require.Equal(t, []string{"v1 pending", "v2 created"}, txHistory(t, w.box, fmt.Sprintf("dispatch:tx:t%03d:1", i)))
	}
}

// Inside the transaction DispatchTx gives Dispatch's answers: a repeat of
// a recorded ID with the same payload is already_existed and writes
// nothing, another payload is a conflict, and a name a Cancel left held
// is refused; a repeat before commit replaces the intent.
func TestDispatchTxAnswersAsDispatch(t *testing.T) {
	t.Parallel()
	w := newTxWorld(t, clockwork.NewFakeClockAt(t0))
	d := w.dispatcher(t, cloudtasks.Config{NoRelay: true, Durability: cloudtasks.DurabilityStrict})
	ctx := context.Background()
	_, err := d.Dispatch(ctx, txRequest("done", "body"))
	require.NoError(t, err)
	_, err = d.Dispatch(ctx, txRequest("cancelled", "body"))
	require.NoError(t, err)
	_, err = d.Cancel(ctx, "dispatch:tx:cancelled:1", "")
	require.NoError(t, err)

	w.inTx(t, true, func(tx outbox.Tx) {
		res, err := d.DispatchTx(ctx, tx, txRequest("done", "body"))
		require.NoError(t, err)
		require.Equal(t, cloudtasks.OutcomeAlreadyExisted, res.Outcome)
		require.True(t, res.Skipped)
		require.Equal(t, worldQueue+"/tasks/"+res.CloudTaskID, res.TaskName)

		_, err = d.DispatchTx(ctx, tx, txRequest("done", "other"))
		require.ErrorIs(t, err, cloudtasks.ErrPayloadConflict)

		_, err = d.DispatchTx(ctx, tx, txRequest("cancelled", "body"))
		require.ErrorIs(t, err, cloudtasks.ErrNameHeld)

		first, err := d.DispatchTx(ctx, tx, txRequest("twice", "body"))
		require.NoError(t, err)
		require.Equal(t, cloudtasks.OutcomeQueued, first.Outcome)
		_, err = d.DispatchTx(ctx, tx, txRequest("twice", "other"))
		require.ErrorIs(t, err, cloudtasks.ErrPayloadConflict, "its own pending record is checked too")
		again, err := d.DispatchTx(ctx, tx, txRequest("twice", "body"))
		require.NoError(t, err)
		require.Equal(t, cloudtasks.OutcomeQueued, again.Outcome)
		require.Equal(t, first.FirstRecorded, again.FirstRecorded)
	})
	st, err := d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{Claimed: 1, Created: 1}, st, "one intent per ID, the latest")
	require.Equal(t, []string{"v1 pending", "v2 pending", "v3 created"}, txHistory(t, w.box, "dispatch:tx:twice:1"))
}

// Recover leaves a pending record whose intent waits for a relay alone,
// however stale: only the relay holds the request that creates its task.
// The relay then creates it.
func TestRecoverLeavesIntentsToTheRelay(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	w := newTxWorld(t, clock)
	d := w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	ctx := context.Background()
	w.inTx(t, true, func(tx outbox.Tx) {
		_, err := d.ScheduleTimerTx(ctx, tx, cloudtasks.TimerRequest{Kind: naming.KindHeartbeat, RunID: "tx", TaskKey: "beat",
			At: clock.Now().Add(time.Hour), Task: cloudtasks.Task{URL: "https://worker.example/check"}})
		require.NoError(t, err)
	})
	clock.Advance(2 * cloudtasks.DefaultStaleAfter)
	st, err := d.Recover(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RecoverStats{}, st)

	rst, err := d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{Claimed: 1, Created: 1}, rst)
	tasks := w.emu.Tasks(worldQueue)
	require.Len(t, tasks, 1)
	require.Equal(t, t0.Add(time.Hour), tasks[0].GetScheduleTime().AsTime(), "the timer's schedule time came through the intent")
}

// coreOnly is an outbox with only the Outbox methods: it records nothing
// inside a transaction.
type coreOnly struct{ outbox.Outbox }

// A dispatcher whose outbox records no intents refuses DispatchTx,
// CancelTx and Relay, naming the outbox.
func TestDispatchTxNeedsAnIntentOutbox(t *testing.T) {
	t.Parallel()
	d, err := cloudtasks.NewDispatcher(context.Background(), coreOnly{outbox.NewMemory(nil)}, &cloudtasks.Config{
		Project: "p", Location: "l", Queue: "q", EmulatorAddr: "127.0.0.1:1"})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	ctx := context.Background()
	_, err = d.DispatchTx(ctx, outbox.NewMemory(nil).Begin(), txRequest("x", "b"))
	require.ErrorIs(t, err, cloudtasks.ErrInvalidConfig)
	require.EqualError(t, err, `cloudtasks: the outbox passed to NewDispatcher (cloudtasks_test.coreOnly) records nothing inside a transaction; DispatchTx and ScheduleTimerTx need an outbox that implements outbox.Intents (outbox/pgbox, outbox.Memory)`)
	_, err = d.CancelTx(ctx, outbox.NewMemory(nil).Begin(), "dispatch:tx:x:1", "q")
	require.ErrorIs(t, err, cloudtasks.ErrInvalidConfig)
	require.EqualError(t, err, `cloudtasks: the outbox passed to NewDispatcher (cloudtasks_test.coreOnly) records nothing inside a transaction; CancelTx needs an outbox that implements outbox.Intents (outbox/pgbox, outbox.Memory)`)
	_, err = d.Relay(ctx)
	require.ErrorIs(t, err, cloudtasks.ErrInvalidConfig)
	require.EqualError(t, err, `cloudtasks: the outbox passed to NewDispatcher (cloudtasks_test.coreOnly) records no intents; Relay needs an outbox that implements outbox.Intents (outbox/pgbox, outbox.Memory)`)
}

// A Dispatch of an ID that an open transaction has recorded does not wait
// for it on a Memory (a database makes it wait; see pgbox's
// TestDispatchWaitsForAnOpenDispatchTx): it creates the task, and the
// transaction's Commit then loses to that record and keeps nothing, so
// no relay makes a second call. One task, one CreateTask call.
func TestDispatchBeforeADispatchTxCommitsWins(t *testing.T) {
	t.Parallel()
	w := newTxWorld(t, clockwork.NewFakeClockAt(t0))
	d := w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	ctx := context.Background()
	tx := w.box.Begin()
	_, err := d.DispatchTx(ctx, tx, txRequest("open", "body"))
	require.NoError(t, err)

	res, err := d.Dispatch(ctx, txRequest("open", "body"))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)
	require.ErrorIs(t, tx.Commit(), outbox.ErrVersionConflict)
	st, err := d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{}, st)
	require.Equal(t, int64(1), w.calls.Load())
	require.NoError(t, d.Close(ctx)) // the overlapped outcome is recorded
	require.Equal(t, []string{"v1 pending", "v2 created"}, txHistory(t, w.box, "dispatch:tx:open:1"))
}

// A cancel recorded in a transaction is carried out by the relay after
// commit, and not at all after a rollback; one committed over a dispatch
// intent not yet relayed replaces it, so that task is never created.
func TestCancelTx(t *testing.T) {
	t.Parallel()
	w := newTxWorld(t, clockwork.NewFakeClockAt(t0))
	d := w.dispatcher(t, cloudtasks.Config{NoRelay: true, Durability: cloudtasks.DurabilityStrict})
	ctx := context.Background()
	created, err := d.Dispatch(ctx, txRequest("made", "body"))
	require.NoError(t, err)
	w.inTx(t, true, func(tx outbox.Tx) {
		_, err := d.DispatchTx(ctx, tx, txRequest("never", "body"))
		require.NoError(t, err)
	})

	w.inTx(t, false, func(tx outbox.Tx) {
		res, err := d.CancelTx(ctx, tx, created.ID, "")
		require.NoError(t, err)
		require.Equal(t, cloudtasks.CancelResult{ID: created.ID, CloudTaskID: created.CloudTaskID, TaskName: created.TaskName, Outcome: cloudtasks.CancelQueued}, res)
	})
	w.inTx(t, true, func(tx outbox.Tx) {
		_, err := d.CancelTx(ctx, tx, "dispatch:tx:never:1", "")
		require.NoError(t, err)
		_, err = d.CancelTx(ctx, tx, "dispatch:tx:unknown:1", "")
		require.ErrorIs(t, err, cloudtasks.ErrInvalidRequest)
		require.ErrorContains(t, err, "is required: the outbox has no record of dispatch:tx:unknown:1")
		_, err = d.CancelTx(ctx, tx, created.ID, "elsewhere")
		require.ErrorIs(t, err, cloudtasks.ErrInvalidRequest)
	})
	st, err := d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{Claimed: 1, Cancelled: 1}, st, "the rolled-back cancel left nothing")
	require.Len(t, w.emu.Tasks(worldQueue), 1, "the dispatched task stays")
	require.Equal(t, int64(1), w.calls.Load(), "the replaced intent's task was never created")
	rec, err := d.WaitOutcome(ctx, "dispatch:tx:never:1")
	require.NoError(t, err)
	require.Equal(t, []string{"cancelled", "NotFound"}, []string{string(rec.Status), rec.ErrorCode})

	w.inTx(t, true, func(tx outbox.Tx) {
		_, err := d.CancelTx(ctx, tx, created.ID, "default")
		require.NoError(t, err)
	})
	st, err = d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{Claimed: 1, Cancelled: 1}, st)
	require.Empty(t, w.emu.Tasks(worldQueue))
	rec, err = d.WaitOutcome(ctx, created.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"cancelled", ""}, []string{string(rec.Status), rec.ErrorCode}, "deleted by the cancel")
}

// A relay whose create took effect but whose answer was lost leaves the
// intent and its pending record; no relay takes the intent while the
// claim lasts, and once it expires the next create meets ALREADY_EXISTS
// and records already_existed: one task. A permanent refusal is recorded
// failed.
func TestRelayLostAnswerAndRefusal(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	w := newTxWorld(t, clock)
	d := w.dispatcher(t, cloudtasks.Config{NoRelay: true, Retry: cloudtasks.RetryPolicy{MaxCalls: 1}})
	ctx := context.Background()
	w.inTx(t, true, func(tx outbox.Tx) {
		_, err := d.DispatchTx(ctx, tx, txRequest("lost", "body"))
		require.NoError(t, err)
	})
	require.NoError(t, w.emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{
		{Methods: []string{"CreateTask"}, Rate: 1, Code: codes.Unavailable, CommitThenFail: true}}}))
	st, err := d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{Claimed: 1, Errors: 1}, st)
	require.Equal(t, 1, w.emu.TaskCount(), "the create took effect")
	st, err = d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{}, st, "claimed still")

	require.NoError(t, w.emu.SetFaults(emulator.Faults{}))
	clock.Advance(2*cloudtasks.DefaultRetryMaxElapsed + cloudtasks.DefaultStaleAfter)
	st, err = d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{Claimed: 1, AlreadyExisted: 1}, st)
	require.Equal(t, 1, w.emu.TaskCount())
	require.Equal(t, []string{"v1 pending", "v2 already_existed"}, txHistory(t, w.box, "dispatch:tx:lost:1"))
	rec, ok, err := w.box.Latest(ctx, outbox.TableDispatch, "dispatch:tx:lost:1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int32(1), rec.CreateCalls, "the lost try counts no call in the record: its relay recorded nothing")

	w.inTx(t, true, func(tx outbox.Tx) {
		_, err := d.DispatchTx(ctx, tx, txRequest("refused", "body"))
		require.NoError(t, err)
	})
	require.NoError(t, w.emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{
		{Methods: []string{"CreateTask"}, Rate: 1, Code: codes.PermissionDenied}}}))
	st, err = d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{Claimed: 1, Failed: 1}, st)
	rec, err = d.WaitOutcome(ctx, "dispatch:tx:refused:1")
	require.NoError(t, err)
	require.Equal(t, []string{"failed", "PermissionDenied"}, []string{string(rec.Status), rec.ErrorCode})
}
