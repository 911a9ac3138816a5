package cloudtasks_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Concurrent calls of one ID share one call to Cloud Tasks, each waiting on
// its own context; seen from outside through a client that holds calls at
// a gate.

// gatedCreate opens a world and a processor whose CreateTask calls wait at
// a gate.
func gatedCreate(t *testing.T) (*world, *cloudtasks.GateClient, *proc) {
	t.Helper()
	w := newWorld(t)
	gate := cloudtasks.NewGate(w.client(t), "CreateTask")
	p := w.open(t, func(c *cloudtasks.Config) { c.EmulatorAddr, c.Client = "", gate })
	return w, gate, p
}

// answer is one call's result, sent from the goroutine that made it.
type answer struct {
	res cloudtasks.DispatchResult
	err error
}

func dispatchAsync(ctx context.Context, d *cloudtasks.Dispatcher, req cloudtasks.DispatchRequest) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		res, err := d.Dispatch(ctx, req)
		ch <- answer{res, err}
	}()
	return ch
}

// receive returns the answer, failing the test instead of hanging when a
// call that should have returned is stuck.
func receive(t *testing.T, ch <-chan answer, what string) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return", what)
		return answer{}
	}
}

// A Dispatch of an ID whose stale record Recover is resolving waits for
// Recover and then answers from the record it wrote; it never shares
// Recover's result (which once panicked with an interface conversion).
func TestDispatchDuringRecoverOfSameID(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	// A first dispatcher creates the task but hears Unavailable: its record
	// stays pending.
	require.NoError(t, w.emu.SetFaults(failAll("CreateTask", codes.Unavailable, true)))
	first := w.open(t, func(c *cloudtasks.Config) { c.Retry.MaxCalls = 1 })
	req := request("run1", "a", 1, "x")
	_, err := first.d.Dispatch(context.Background(), req)
	require.ErrorIs(t, err, cloudtasks.ErrGaveUp)
	first.settle(t)
	require.NoError(t, w.emu.SetFaults(emulator.Faults{}))
	w.clock.Advance(2 * cloudtasks.DefaultStaleAfter)

	gate := cloudtasks.NewGate(w.client(t), "GetTask")
	p := w.open(t, func(c *cloudtasks.Config) { c.EmulatorAddr, c.Client = "", gate })
	d := p.d
	stats := make(chan cloudtasks.RecoverStats, 1)
	go func() {
		st, err := d.Recover(context.Background())
		require.NoError(t, err)
		stats <- st
	}()
	gate.Reached(t) // Recover is asking Cloud Tasks about the ID
	call := dispatchAsync(context.Background(), d, req)
	close(gate.Open)

	got := receive(t, call, "Dispatch")
	require.NoError(t, got.err)
	require.Equal(t, cloudtasks.OutcomeAlreadyExisted, got.res.Outcome)
	require.True(t, got.res.Skipped)
	require.Equal(t, 0, got.res.Calls)
	select {
	case st := <-stats:
		require.Equal(t, cloudtasks.RecoverStats{Stale: 1, Found: 1, HandedOver: 1}, st)
	case <-time.After(30 * time.Second):
		t.Fatal("Recover did not return")
	}
	require.Equal(t, 1, w.emu.TaskCount())
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusPending, outbox.StatusAlreadyExisted}, statuses(p.history(t, got.res.ID)))
}

// A caller that joins another caller's call waits on its own context: it
// returns when its own context ends, with an error that says so, and the
// first caller still gets the outcome.
func TestFollowerWaitsOnItsOwnContext(t *testing.T) {
	t.Parallel()
	_, gate, p := gatedCreate(t)
	d := p.d
	req := request("run1", "a", 1, "x")

	leader := dispatchAsync(context.Background(), d, req)
	gate.Reached(t)
	ctx, cancel := context.WithCancel(context.Background())
	follower := dispatchAsync(ctx, d, req)
	cancel()
	got := receive(t, follower, "the cancelled follower")
	// Its context may end before or after it joined the leader's call.
	require.True(t, errors.Is(got.err, cloudtasks.ErrStoppedWaiting) || errors.Is(got.err, cloudtasks.ErrNotStarted), "%v", got.err)
	require.ErrorIs(t, got.err, context.Canceled)
	var we *cloudtasks.WaitError
	require.ErrorAs(t, got.err, &we)
	require.Equal(t, "dispatch:run1:a:1", we.ID)

	close(gate.Open)
	lead := receive(t, leader, "the leader")
	require.NoError(t, lead.err)
	require.Equal(t, cloudtasks.OutcomeCreated, lead.res.Outcome)
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusCreated}, statuses(p.history(t, lead.res.ID)))
}

// When the first caller's context ends, its call goes on for the callers
// that joined it: they get the outcome, not the first caller's error, and
// the outcome is recorded.
func TestLeaderCancellationDoesNotEndSharedCall(t *testing.T) {
	t.Parallel()
	w, gate, p := gatedCreate(t)
	d := p.d
	req := request("run1", "a", 1, "x")

	ctx, cancel := context.WithCancel(context.Background())
	leader := dispatchAsync(ctx, d, req)
	gate.Reached(t)
	follower := dispatchAsync(context.Background(), d, req)
	cancel()
	lead := receive(t, leader, "the cancelled leader")
	require.ErrorIs(t, lead.err, cloudtasks.ErrStoppedWaiting)
	require.ErrorIs(t, lead.err, context.Canceled)

	close(gate.Open)
	got := receive(t, follower, "the follower")
	require.NoError(t, got.err)
	require.Equal(t, cloudtasks.OutcomeAlreadyExisted, got.res.Outcome)
	require.Equal(t, 1, w.emu.TaskCount())
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusCreated}, statuses(p.history(t, got.res.ID)))
}
