package user_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

const queue = "projects/acme/locations/europe-west1/queues/work"

// start gives a test an emulator and a dispatcher on one fake clock, as
// the cloudtasks package documentation's Testing section says.
func start(t *testing.T, box func(clockwork.Clock) outbox.Outbox) (*emulator.Server, *cloudtasks.Dispatcher, *clockwork.FakeClock) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC))
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock, Queues: []emulator.QueueConfig{{Name: queue}}})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	d, err := cloudtasks.NewDispatcher(context.Background(), box(clock), &cloudtasks.Config{
		Project: "acme", Location: "europe-west1", Queue: "work", EmulatorAddr: emu.Addr(), Clock: clock,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
	return emu, d, clock
}

func memory(clock clockwork.Clock) outbox.Outbox { return outbox.NewMemory(clock) }

// The whole door from outside: dispatch twice, schedule, cancel, recover,
// read history back.
func TestTheDoor(t *testing.T) {
	ctx := context.Background()
	emu, d, clock := start(t, memory)
	task := cloudtasks.Task{URL: "https://worker.acme.example/extract", Body: []byte(`{"day":"2026-06-01"}`)}

	first, err := d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "run7", TaskKey: "extract", Identity: naming.Attempt(1), Task: task})
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, first.Outcome)
	again, err := d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "run7", TaskKey: "extract", Identity: naming.Attempt(1), Task: task})
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeAlreadyExisted, again.Outcome)
	require.Equal(t, first.CloudTaskID, again.CloudTaskID)

	timer, err := d.ScheduleTimer(ctx, cloudtasks.TimerRequest{Kind: naming.KindRetry, RunID: "run7", TaskKey: "extract",
		Next: naming.Attempt(2), At: clock.Now().Add(5 * time.Minute), Task: task})
	require.NoError(t, err)
	cancelled, err := d.CancelTimer(ctx, timer.TimerID, "")
	require.NoError(t, err)
	require.Equal(t, cloudtasks.CancelDeleted, cancelled.Outcome)
	require.Equal(t, 1, emu.TaskCount())

	// A create whose answer is lost, on every try: the record stays
	// pending until Recover finds the task.
	require.NoError(t, emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{
		{Methods: []string{"CreateTask"}, Rate: 1, Code: codes.Unavailable, CommitThenFail: true},
	}}))
	_, err = d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "run7", TaskKey: "load", Identity: naming.Attempt(1), Task: task})
	require.ErrorIs(t, err, cloudtasks.ErrGaveUp)
	require.NoError(t, emu.SetFaults(emulator.Faults{}))
	clock.Advance(cloudtasks.DefaultStaleAfter)
	st, err := d.Recover(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RecoverStats{Stale: 1, Found: 1}, st)

	hist, err := d.History(ctx, "dispatch:run7:load:1")
	require.NoError(t, err)
	var statuses []outbox.Status
	for _, r := range hist {
		statuses = append(statuses, r.Status)
	}
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusPending, outbox.StatusAlreadyExisted}, statuses)
}

// Zero values a user can write get a defined answer, never a silent one.
func TestZeroValuesAreAnswered(t *testing.T) {
	ctx := context.Background()
	_, err := cloudtasks.NewDispatcher(ctx, nil, nil)
	require.ErrorIs(t, err, cloudtasks.ErrInvalidConfig)
	_, err = cloudtasks.NewDispatcher(ctx, outbox.NewMemory(nil), &cloudtasks.Config{})
	var ce *cloudtasks.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Project", ce.Field)

	_, d, _ := start(t, memory)
	_, err = d.Dispatch(ctx, cloudtasks.DispatchRequest{})
	require.ErrorIs(t, err, cloudtasks.ErrInvalidRequest)
	_, err = d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Identity{},
		Task: cloudtasks.Task{URL: "https://w.example/x"}})
	var re *cloudtasks.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "Identity", re.Field)
	_, err = d.ScheduleTimer(ctx, cloudtasks.TimerRequest{})
	require.ErrorAs(t, err, &re)
	require.Equal(t, "At", re.Field)
	_, err = d.CancelTimer(ctx, "", "")
	require.ErrorAs(t, err, &re)
	require.Equal(t, "TimerID", re.Field)
	_, _, err = d.Latest(ctx, "")
	require.ErrorAs(t, err, &re)
	require.Equal(t, "ID", re.Field)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	_, err = d.Dispatch(ended, cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Unique(), Task: cloudtasks.Task{URL: "https://w.example/x"}})
	require.True(t, errors.Is(err, cloudtasks.ErrNotStarted), "%v", err)
}

// The Parquet outbox, opened by the program and handed to the dispatcher,
// as docs/dispatching.md shows.
func TestParquetOutbox(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	var box *parquetbox.Outbox
	_, d, _ := start(t, func(clock clockwork.Clock) outbox.Outbox {
		var err error
		box, err = parquetbox.Open(ctx, parquetbox.Config{Root: root, Clock: clock})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, box.Close()) })
		return box
	})
	res, err := d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.CallerKey("evt-1"),
		Task: cloudtasks.Task{URL: "https://w.example/x"}})
	require.NoError(t, err)
	require.NoError(t, d.Close(ctx))
	latest, ok, err := box.Latest(ctx, outbox.TableDispatch, res.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, outbox.StatusCreated, latest.Status)
}

// Dispatches recorded in the caller's transaction, as docs/transactional.md
// shows them, on the in-memory store: a batch and a single call in one
// transaction, a rolled-back one that leaves nothing, the relay that
// creates the committed ones, and the batch's refusals.
func TestDispatchInATransaction(t *testing.T) {
	ctx := context.Background()
	var m *outbox.Memory
	emu, d, _ := start(t, func(c clockwork.Clock) outbox.Outbox { m = outbox.NewMemory(c); return m })
	req := func(key string) cloudtasks.DispatchRequest {
		return cloudtasks.DispatchRequest{RunID: "order42", TaskKey: key, Identity: naming.Attempt(1),
			Task: cloudtasks.Task{URL: "https://worker.acme.example/" + key, Body: []byte(key)}}
	}

	rolledBack := m.Begin()
	_, err := d.DispatchManyTx(ctx, rolledBack, []cloudtasks.DispatchRequest{req("ship"), req("invoice")})
	require.NoError(t, err)
	require.NoError(t, rolledBack.Rollback())

	tx := m.Begin()
	many, err := d.DispatchManyTx(ctx, tx, []cloudtasks.DispatchRequest{req("ship"), req("invoice")})
	require.NoError(t, err)
	one, err := d.DispatchTx(ctx, tx, req("notify"))
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	var ids []string
	for _, r := range append(many, one) {
		require.Equal(t, cloudtasks.OutcomeQueued, r.Outcome, r.ID)
		ids = append(ids, r.ID)
	}
	require.Equal(t, []string{"dispatch:order42:ship:1", "dispatch:order42:invoice:1", "dispatch:order42:notify:1"}, ids)

	_, err = d.Relay(ctx)
	require.NoError(t, err)
	for _, id := range ids {
		rec, err := d.WaitOutcome(ctx, id)
		require.NoError(t, err)
		require.Equal(t, outbox.StatusCreated, rec.Status, id)
	}
	require.Equal(t, 3, emu.TaskCount(), "the rolled-back batch created nothing")

	again := m.Begin()
	repeat, err := d.DispatchManyTx(ctx, again, []cloudtasks.DispatchRequest{req("ship"), req("refund")})
	require.NoError(t, err)
	require.Equal(t, []any{cloudtasks.OutcomeAlreadyExisted, true, cloudtasks.OutcomeQueued},
		[]any{repeat[0].Outcome, repeat[0].Skipped, repeat[1].Outcome})
	_, err = d.DispatchManyTx(ctx, again, []cloudtasks.DispatchRequest{req("pack"), req("pack")})
	var re *cloudtasks.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "reqs[1]", re.Field)
	require.NoError(t, again.Rollback())
}
