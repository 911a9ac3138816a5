package cloudtasks_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// The regression tests of issue "Many replicas, one truth": several
// dispatcher processes (each its own parquetbox handle and processor
// UUID) on one outbox root and one emulator. A false answer is
// already_existed for an ID whose task the emulator does not hold.

// retryTimer is the retry timer of attempt 1 of task in run r, due an
// hour after t0.
func retryTimer(task string) cloudtasks.TimerRequest {
	return cloudtasks.TimerRequest{Kind: naming.KindRetry, RunID: "r", TaskKey: task, Next: naming.Attempt(2),
		At: t0.Add(time.Hour), Task: cloudtasks.Task{URL: "https://worker.example/retry", Body: []byte(task)}}
}

// holds reports whether the emulator holds the task named name.
func (w *world) holds(t *testing.T, c cloudtasks.Client, name string) bool {
	t.Helper()
	_, err := c.GetTask(context.Background(), &cloudtaskspb.GetTaskRequest{Name: name})
	if status.Code(err) == codes.NotFound {
		return false
	}
	require.NoError(t, err)
	return true
}

// A process kept open schedules a timer (or dispatches), another cancels
// it, and the first is asked again: it reads the other's cancel and says
// the name is held, never already_existed (it did, from its own memory).
func TestKeptOpenProcessSeesAnotherProcessCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	a, b := w.open(t, nil), w.open(t, nil)

	res, err := a.d.ScheduleTimer(ctx, retryTimer("kept"))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)
	a.settle(t)
	cr, err := b.d.CancelTimer(ctx, res.TimerID, "")
	require.NoError(t, err)
	require.Equal(t, cloudtasks.CancelDeleted, cr.Outcome)
	b.settle(t)
	_, err = a.d.ScheduleTimer(ctx, retryTimer("kept"))
	require.ErrorIs(t, err, cloudtasks.ErrNameHeld, "the timer was cancelled elsewhere; no task exists")

	dres, err := a.d.Dispatch(ctx, request("r", "kept", 1, "x"))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, dres.Outcome)
	a.settle(t)
	_, err = b.d.Cancel(ctx, dres.ID, "")
	require.NoError(t, err)
	b.settle(t)
	_, err = a.d.Dispatch(ctx, request("r", "kept", 1, "x"))
	require.ErrorIs(t, err, cloudtasks.ErrNameHeld, "the dispatch was cancelled elsewhere; no task exists")
}

// skewedClock is a clock behind another by a fixed offset, as a second
// machine's would be; timers and sleeps are the base clock's.
type skewedClock struct {
	*clockwork.FakeClock
	by time.Duration
}

func (c skewedClock) Now() time.Time                  { return c.FakeClock.Now().Add(-c.by) }
func (c skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c skewedClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// With B's clock 50 ms behind A's, B's cancels still order after A's
// creates they followed, so a third process rescheduling the 20 timers
// gets the held name for each, and no already_existed (it got 20 of 20).
func TestSkewedClocksDoNotReorderACancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	a := w.open(t, nil)
	b := w.open(t, func(c *cloudtasks.Config) { c.Clock = skewedClock{w.clock, 50 * time.Millisecond} })
	c := w.open(t, nil)
	const n = 20
	for i := range n {
		_, err := a.d.ScheduleTimer(ctx, retryTimer(fmt.Sprint("skew", i)))
		require.NoError(t, err)
	}
	a.settle(t)
	for i := range n {
		req := retryTimer(fmt.Sprint("skew", i))
		id, err := req.ID()
		require.NoError(t, err)
		_, err = b.d.CancelTimer(ctx, id.String(), "")
		require.NoError(t, err)
	}
	b.settle(t)
	falseAnswers, held := 0, 0
	for i := range n {
		res, err := c.d.ScheduleTimer(ctx, retryTimer(fmt.Sprint("skew", i)))
		switch {
		case errors.Is(err, cloudtasks.ErrNameHeld):
			held++
		case err == nil && res.Outcome == cloudtasks.OutcomeAlreadyExisted:
			falseAnswers++
		default:
			require.NoError(t, err)
		}
	}
	require.Equal(t, 0, falseAnswers)
	require.Equal(t, n, held)
}

// Two schedulers race on 200 timer IDs: A cancels each while B schedules
// it again. Whatever the interleaving, the records they leave make a third
// process answer already_existed only for a task the emulator holds (B's
// pending record, written blind of A's cancel, made it answer
// already_existed with no task).
func TestRacingSchedulersAndCancelsGiveNoFalseAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	a, b, c := w.open(t, nil), w.open(t, nil), w.open(t, nil)
	client := w.client(t)
	const n = 200
	names := make([]string, n)
	for i := range n {
		res, err := a.d.ScheduleTimer(ctx, retryTimer(fmt.Sprint("race", i)))
		require.NoError(t, err)
		names[i] = res.TaskName
	}
	a.settle(t)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req := retryTimer(fmt.Sprint("race", i))
			id, _ := req.ID()
			_, err := a.d.CancelTimer(ctx, id.String(), "")
			require.NoError(t, err)
		})
		wg.Go(func() {
			_, err := b.d.ScheduleTimer(ctx, retryTimer(fmt.Sprint("race", i)))
			if err != nil && !errors.Is(err, cloudtasks.ErrNameHeld) && !errors.Is(err, cloudtasks.ErrIndeterminate) {
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	a.settle(t)
	b.settle(t)
	falseAnswers := 0
	for i := range n {
		holds := w.holds(t, client, names[i])
		res, err := c.d.ScheduleTimer(ctx, retryTimer(fmt.Sprint("race", i)))
		if err == nil && res.Outcome == cloudtasks.OutcomeAlreadyExisted && !holds {
			falseAnswers++
		}
	}
	require.Equal(t, 0, falseAnswers)
}

// Two processes whose default queues differ (a rolling redeploy changed
// Config.Queue) each write an ID's first record before they see the
// other's, so each creates the task in its own queue
// (docs/consistency.md). A cancel, even from one of them with its view of
// the other an hour old, deletes the task in both queues.
func TestCancelDeletesTheTaskInEveryQueueBlindFirstWritesMade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(t0)
	const otherQueue = "projects/proj/locations/europe-west1/queues/other"
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock,
		Queues: []emulator.QueueConfig{{Name: worldQueue}, {Name: otherQueue}}})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	w := &world{emu: emu, clock: clock, root: t.TempDir()}
	stale := func(o *parquetbox.Config) { o.RefreshInterval = time.Hour }
	a := w.openWith(t, nil, stale)
	b := w.openWith(t, func(c *cloudtasks.Config) { c.Queue = "other" }, stale)
	for _, p := range []*proc{a, b} { // each takes its view of the other now
		_, _, err := p.d.Latest(ctx, "dispatch:r:warm:1")
		require.NoError(t, err)
	}

	req := request("r", "blind", 1, "x")
	req.Task.ScheduleTime = t0.Add(time.Hour)
	ra, err := a.d.Dispatch(ctx, req)
	require.NoError(t, err)
	rb, err := b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, ra.Outcome)
	require.Equal(t, cloudtasks.OutcomeCreated, rb.Outcome, "B could not see A's record: the limit docs/consistency.md states")
	require.NotEqual(t, ra.TaskName, rb.TaskName)
	c := w.client(t)
	require.True(t, w.holds(t, c, ra.TaskName))
	require.True(t, w.holds(t, c, rb.TaskName))
	a.settle(t)
	b.settle(t)

	res, err := a.d.Cancel(ctx, ra.ID, "")
	require.NoError(t, err)
	require.Equal(t, cloudtasks.CancelDeleted, res.Outcome)
	require.False(t, w.holds(t, c, ra.TaskName), "the task in A's queue")
	require.False(t, w.holds(t, c, rb.TaskName), "the task in B's queue, which A's stale view had not seen")
}
