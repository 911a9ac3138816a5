package cloudtasks_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/timers"
)

// These tests use the package as a user does: only its exported API, the
// in-process emulator and an in-memory outbox. Each answers a call that
// used to be answered wrongly without a word.

const (
	doorQueue  = "projects/p/locations/l/queues/default"
	otherQueue = "projects/p/locations/l/queues/other"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

type door struct {
	emu   *emulator.Server
	d     *cloudtasks.Dispatcher
	box   *outbox.Memory
	clock *clockwork.FakeClock
	cfg   cloudtasks.Config
}

func openDoor(t *testing.T, edit func(*cloudtasks.Config)) *door {
	t.Helper()
	clock := clockwork.NewFakeClockAt(t0)
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock,
		Queues: []emulator.QueueConfig{{Name: doorQueue}, {Name: otherQueue}}})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	b := &door{emu: emu, box: outbox.NewMemory(clock), clock: clock,
		cfg: cloudtasks.Config{Project: "p", Location: "l", Queue: "default", EmulatorAddr: emu.Addr(), Clock: clock}}
	if edit != nil {
		edit(&b.cfg)
	}
	b.d, err = cloudtasks.NewDispatcher(context.Background(), b.box, &b.cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.d.Close(context.Background())) })
	return b
}

// settle makes every answered call's records readable: an answer in the
// default (overlapped) mode may come before its outcome is recorded, and
// Close is what waits for them. The door goes on with a new dispatcher on
// the same outbox and config.
func (b *door) settle(t *testing.T) {
	t.Helper()
	require.NoError(t, b.d.Close(context.Background()))
	var err error
	b.d, err = cloudtasks.NewDispatcher(context.Background(), b.box, &b.cfg)
	require.NoError(t, err)
}

func task() cloudtasks.Task { return cloudtasks.Task{URL: "https://worker.example/x"} }

// A request that does not say which attempt it is, or names it by an
// empty key, is refused before any call, naming the field.
func TestIdentityMustBeSaid(t *testing.T) {
	t.Parallel()
	b := openDoor(t, nil)
	tests := []struct {
		name  string
		id    naming.Identity
		field string
	}{
		{"zero identity", naming.Identity{}, "Identity"},
		{"empty caller key", naming.CallerKey(""), "Identity"},
	}
	for _, tt := range tests {
		_, err := b.d.Dispatch(context.Background(), cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: tt.id, Task: task()})
		var re *cloudtasks.RequestError
		require.ErrorAs(t, err, &re, tt.name)
		require.ErrorIs(t, err, cloudtasks.ErrInvalidRequest, tt.name)
		require.Equal(t, tt.field, re.Field, tt.name)
	}
	require.Zero(t, b.emu.TaskCount())
	require.Empty(t, b.emu.RememberedNames())

	// Two events under two keys are two tasks.
	for _, key := range []string{"evt-43", "evt-44"} {
		res, err := b.d.Dispatch(context.Background(), cloudtasks.DispatchRequest{RunID: "k", TaskKey: "t", Identity: naming.CallerKey(key), Task: task()})
		require.NoError(t, err)
		require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome, key)
	}
	require.Equal(t, 2, b.emu.TaskCount())
}

func heartbeat(b *door, queue string) cloudtasks.TimerRequest {
	tk := task()
	tk.Queue = queue
	return cloudtasks.TimerRequest{Kind: naming.KindHeartbeat, RunID: "r", TaskKey: "t", At: b.clock.Now().Add(time.Minute), Task: tk}
}

// A cancel goes to the queue the outbox recorded; a queue that differs is
// refused; without a record, the queue must be named.
func TestCancelGoesWhereTheTaskIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openDoor(t, nil)
	res, err := b.d.ScheduleTimer(ctx, heartbeat(b, "other"))
	require.NoError(t, err)

	_, err = b.d.CancelTimer(ctx, res.TimerID, "default")
	var re *cloudtasks.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "Queue", re.Field)
	require.Equal(t, "default", re.Value)
	require.Len(t, b.emu.Tasks(otherQueue), 1, "a refused cancel deletes nothing")

	got, err := b.d.CancelTimer(ctx, res.TimerID, "")
	require.NoError(t, err)
	require.Equal(t, cloudtasks.CancelResult{ID: res.TimerID, CloudTaskID: res.CloudTaskID, TaskName: otherQueue + "/tasks/" + res.CloudTaskID,
		Outcome: cloudtasks.CancelDeleted}, got)
	require.Empty(t, b.emu.Tasks(otherQueue))
	latest, ok, err := b.d.Latest(ctx, res.TimerID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, outbox.StatusCancelled, latest.Status)
	require.Equal(t, "", latest.ErrorCode, "the record says the cancel deleted the task")

	// An ID nobody recorded: the queue must be named, and then the answer
	// says nobody knew it.
	unknown, err := naming.NewHeartbeat("r", "never", t0)
	require.NoError(t, err)
	_, err = b.d.CancelTimer(ctx, unknown.String(), "")
	require.ErrorAs(t, err, &re)
	require.Equal(t, "Queue", re.Field)
	got, err = b.d.CancelTimer(ctx, unknown.String(), "other")
	require.NoError(t, err)
	require.Equal(t, cloudtasks.CancelUnknown, got.Outcome)
	_, ok, err = b.d.Latest(ctx, unknown.String())
	require.NoError(t, err)
	require.False(t, ok, "nothing is recorded for an unknown ID")

	// A dispatch ID is not a timer ID.
	_, err = b.d.CancelTimer(ctx, "dispatch:r:t:1", "")
	require.ErrorAs(t, err, &re)
	require.Equal(t, "TimerID", re.Field)
}

// A timer scheduled again after a cancel deleted its task meets the name
// Cloud Tasks holds: an error says so and until when, every time; the
// outbox never claims a task exists. (The end of the hold is tested with a
// dispatch below.)
func TestScheduleAfterCancelSaysTheNameIsHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openDoor(t, nil)
	req := heartbeat(b, "")
	res, err := b.d.ScheduleTimer(ctx, req)
	require.NoError(t, err)
	_, err = b.d.CancelTimer(ctx, res.TimerID, "")
	require.NoError(t, err)
	cancelledAt := b.clock.Now()

	for range 2 {
		b.clock.Advance(time.Hour)
		_, err = b.d.ScheduleTimer(ctx, req)
		require.ErrorIs(t, err, cloudtasks.ErrNameHeld)
		var held *cloudtasks.NameHeldError
		require.ErrorAs(t, err, &held)
		require.Equal(t, res.TimerID, held.ID)
		// The memory outbox nudges records written at one instant apart by
		// a microsecond.
		require.WithinDuration(t, cancelledAt.Add(24*time.Hour), held.HeldUntil, time.Millisecond)
		require.Zero(t, b.emu.TaskCount())
		latest, _, err := b.d.Latest(ctx, res.TimerID)
		require.NoError(t, err)
		require.Equal(t, outbox.StatusCancelled, latest.Status)
	}
}

// A heartbeat check cancelled and asked again is refused with advice that
// fits a heartbeat, which has no attempt: a later check time. The next
// check timers.Heartbeat.Next gives is another name, also for a task that
// started at a fraction of a second, and is created.
func TestHeartbeatAfterCancelMovesToTheNextCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openDoor(t, nil)
	started := b.clock.Now().Add(500 * time.Millisecond)
	beat := timers.Heartbeat{Every: time.Minute}
	check, err := beat.Next(started, started)
	require.NoError(t, err)
	req := heartbeat(b, "")
	req.At = check
	res, err := b.d.ScheduleTimer(ctx, req)
	require.NoError(t, err)
	_, err = b.d.CancelTimer(ctx, res.TimerID, "")
	require.NoError(t, err)

	_, err = b.d.ScheduleTimer(ctx, req)
	var held *cloudtasks.NameHeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, fmt.Sprintf("cloudtasks: %s: its task was deleted by a cancel at %s and Cloud Tasks holds the name until about %s; no task exists: schedule a later check time (timers.Heartbeat.Next after this one), or try again after then",
		res.TimerID, held.CancelledAt.UTC().Format(time.RFC3339), held.HeldUntil.UTC().Format(time.RFC3339)), err.Error())

	req.At, err = beat.Next(started, check)
	require.NoError(t, err)
	require.Equal(t, check.Add(time.Minute), req.At)
	next, err := b.d.ScheduleTimer(ctx, req)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, next.Outcome)
	require.NotEqual(t, res.TimerID, next.TimerID)
	require.Equal(t, 1, b.emu.TaskCount())
}

// After a cancel that found the task already gone, ALREADY_EXISTS means
// the task existed: once its schedule time has passed it may have run, and
// already_existed stays the answer; before that time it cannot have run,
// so it was deleted (by a cancel this outbox cannot see yet, say), and its
// name is held.
func TestScheduleAfterCancelOfAGoneTask(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		advance time.Duration
		held    bool
	}{
		{"after its schedule time: it ran", 2 * time.Minute, false},
		{"before its schedule time: it was deleted", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := openDoor(t, nil)
			req := heartbeat(b, "")
			res, err := b.d.ScheduleTimer(ctx, req)
			require.NoError(t, err)
			// The task is gone (it ran, or another process deleted it);
			// its name stays remembered.
			client, err := b.emu.NewClient(ctx)
			require.NoError(t, err)
			defer client.Close()
			require.NoError(t, client.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: res.TaskName}))
			b.clock.Advance(tc.advance)
			got, err := b.d.CancelTimer(ctx, res.TimerID, "")
			require.NoError(t, err)
			require.Equal(t, cloudtasks.CancelAlreadyGone, got.Outcome)
			again, err := b.d.ScheduleTimer(ctx, req)
			if tc.held {
				require.ErrorIs(t, err, cloudtasks.ErrNameHeld)
				require.Equal(t, 0, b.emu.TaskCount())
				return
			}
			require.NoError(t, err)
			require.Equal(t, cloudtasks.OutcomeAlreadyExisted, again.Outcome)
		})
	}
}

// The same holds for a dispatch: Dispatch, Cancel (the task is deleted),
// Dispatch again meets the held name and says so; once the hold is over the
// same ID makes a task again.
func TestDispatchAfterCancelSaysTheNameIsHeldUntilItIsNot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openDoor(t, nil)
	req := cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Attempt(3), Task: task()}
	res, err := b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	_, err = b.d.Cancel(ctx, res.ID, "other")
	var re *cloudtasks.RequestError
	require.ErrorAs(t, err, &re, "the dispatch was recorded in the default queue")
	require.Equal(t, "Queue", re.Field)
	got, err := b.d.Cancel(ctx, res.ID, "")
	require.NoError(t, err)
	require.Equal(t, cloudtasks.CancelDeleted, got.Outcome)
	cancelledAt := b.clock.Now()

	b.clock.Advance(23 * time.Hour)
	_, err = b.d.Dispatch(ctx, req)
	var held *cloudtasks.NameHeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, res.ID, held.ID)
	require.True(t, strings.HasSuffix(err.Error(), "no task exists: use a new attempt, or try again after then"), err.Error())
	require.WithinDuration(t, cancelledAt.Add(24*time.Hour), held.HeldUntil, time.Millisecond)
	require.Zero(t, b.emu.TaskCount())
	b.settle(t) // a call made before the held-name record is kept would share its answer

	b.clock.Advance(2 * time.Hour) // past the service's (and the emulator's) 24 h
	again, err := b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, again.Outcome)
	require.Equal(t, 1, b.emu.TaskCount())
	latest, _, err := b.d.Latest(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, outbox.StatusCreated, latest.Status)
}

// After Recover recorded not_found (the task ran and is gone, or was never
// made), ALREADY_EXISTS to a repeat means the task existed: the answer is
// already_existed, not a held name.
func TestDispatchAfterNotFoundIsAlreadyExisted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openDoor(t, nil)
	req := cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Attempt(1), Task: task()}
	// The create succeeds on the server; every answer is lost.
	require.NoError(t, b.emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{
		{Methods: []string{"CreateTask"}, Rate: 1, Code: codes.Unavailable, CommitThenFail: true}}}))
	_, err := b.d.Dispatch(ctx, req)
	require.ErrorIs(t, err, cloudtasks.ErrGaveUp)
	require.NoError(t, b.emu.SetFaults(emulator.Faults{}))
	// The task runs and is deleted by the service.
	client, err := b.emu.NewClient(ctx)
	require.NoError(t, err)
	defer client.Close()
	id, err := req.ID()
	require.NoError(t, err)
	require.NoError(t, client.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: doorQueue + "/tasks/" + id.CloudTaskID()}))

	b.clock.Advance(cloudtasks.DefaultStaleAfter)
	st, err := b.d.Recover(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RecoverStats{Stale: 1, NotFound: 1}, st)
	latest, _, err := b.d.Latest(ctx, id.String())
	require.NoError(t, err)
	require.Equal(t, outbox.StatusNotFound, latest.Status)

	res, err := b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeAlreadyExisted, res.Outcome)
	require.Zero(t, b.emu.TaskCount())
}

// A context that ended before the call says that nothing was started,
// and makes no call.
func TestEndedContextStartsNothing(t *testing.T) {
	t.Parallel()
	b := openDoor(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Attempt(1), Task: task()})
	require.ErrorIs(t, err, cloudtasks.ErrNotStarted)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, errors.Is(err, cloudtasks.ErrStoppedWaiting))
	require.False(t, errors.Is(err, cloudtasks.ErrGaveUp))
	require.ErrorContains(t, err, "not started")
	_, err = b.d.CancelTimer(ctx, "timer:heartbeat:r:t:1767225600", "default")
	require.ErrorIs(t, err, cloudtasks.ErrNotStarted)
	require.Empty(t, b.emu.RememberedNames())
	_, ok, err := b.d.Latest(context.Background(), "dispatch:r:t:1")
	require.NoError(t, err)
	require.False(t, ok)
}

// With a fake clock shared by the dispatcher and the emulator, transient
// failures are retried and Dispatch and Close finish without the test
// moving the clock; the clock shows the backoff the retries waited.
func TestFakeClockRetriesFinish(t *testing.T) {
	t.Parallel()
	var delays []time.Duration
	b := openDoor(t, func(c *cloudtasks.Config) {
		c.OnRetry = func(ev cloudtasks.RetryEvent) { delays = append(delays, ev.Delay) }
	})
	require.NoError(t, b.emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{
		{Methods: []string{"CreateTask"}, Rate: 1, Code: codes.Unavailable},
	}}))
	res, err := b.d.Dispatch(context.Background(), cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Attempt(1), Task: task()})
	require.ErrorIs(t, err, cloudtasks.ErrGaveUp)
	require.Equal(t, cloudtasks.DispatchResult{}, res)
	require.Len(t, delays, cloudtasks.DefaultRetryMaxCalls-1)
	var waited time.Duration
	for i, d := range delays {
		full := time.Duration(float64(cloudtasks.DefaultRetryInitial) * float64(int(1)<<i))
		full = min(full, cloudtasks.DefaultRetryMax)
		require.LessOrEqual(t, d, full, "retry %d", i+1)
		require.GreaterOrEqual(t, d, full/2, "retry %d (jitter at most half)", i+1)
		waited += d
	}
	require.Equal(t, t0.Add(waited), b.clock.Now())
	require.NoError(t, b.d.Close(context.Background()))
}

// DeleteTask failures match ErrCancelFailed, never ErrCreateFailed.
func TestCancelFailureIsNotACreateFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openDoor(t, nil)
	res, err := b.d.ScheduleTimer(ctx, heartbeat(b, ""))
	require.NoError(t, err)
	require.NoError(t, b.emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{
		{Methods: []string{"DeleteTask"}, Rate: 1, Code: codes.PermissionDenied},
	}}))
	_, err = b.d.CancelTimer(ctx, res.TimerID, "")
	require.ErrorIs(t, err, cloudtasks.ErrCancelFailed)
	require.False(t, errors.Is(err, cloudtasks.ErrCreateFailed))
	require.False(t, errors.Is(err, cloudtasks.ErrGaveUp))
}

// NewDispatcher refuses a missing outbox and a client named two ways.
func TestNewDispatcherRefusesAmbiguousSetups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := &cloudtasks.Config{Project: "p", Location: "l", Queue: "q"}
	_, err := cloudtasks.NewDispatcher(ctx, nil, cfg)
	var ce *cloudtasks.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "outbox", ce.Field)
	require.EqualError(t, err, "cloudtasks: the outbox passed to NewDispatcher (nil) is required: pass outbox.NewMemory(clock) to keep records in this process, or a *parquetbox.Outbox to keep them in Parquet files")

	cfg.EmulatorAddr, cfg.Client = "127.0.0.1:1", fakeClient{}
	_, err = cloudtasks.NewDispatcher(ctx, outbox.NewMemory(nil), cfg)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Client", ce.Field)
}

// fakeClient is a Client that is never called.
type fakeClient struct{ cloudtasks.Client }

// A timer further than 30 days ahead is refused with ErrTooFar, and a
// heartbeat with an identity is refused.
func TestTimerRequestChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openDoor(t, nil)
	far := heartbeat(b, "")
	far.At = b.clock.Now().Add(31 * 24 * time.Hour)
	_, err := b.d.ScheduleTimer(ctx, far)
	require.ErrorIs(t, err, cloudtasks.ErrTooFar)
	withID := heartbeat(b, "")
	withID.Next = naming.Attempt(1)
	_, err = b.d.ScheduleTimer(ctx, withID)
	var re *cloudtasks.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "Next", re.Field)
	// A retry timer is for one attempt: it must say which.
	retry := heartbeat(b, "")
	retry.Kind = naming.KindRetry
	_, err = b.d.ScheduleTimer(ctx, retry)
	require.ErrorAs(t, err, &re)
	require.Equal(t, "Next", re.Field)
	require.Zero(t, b.emu.TaskCount())
}

// A task larger than the service takes, as its encoding measures it, is
// refused before any call; the largest body that fits is sent.
func TestTaskSizeIsMeasuredAsEncoded(t *testing.T) {
	t.Parallel()
	b := openDoor(t, nil)
	req := func(n int) cloudtasks.DispatchRequest {
		tk := task()
		tk.Body = make([]byte, n)
		return cloudtasks.DispatchRequest{RunID: "r", TaskKey: "big", Identity: naming.Attempt(uint64(n)), Task: tk}
	}
	_, err := b.d.Dispatch(context.Background(), req(cloudtasks.MaxTaskSize))
	var re *cloudtasks.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "Body", re.Field)
	require.Equal(t, "1000000 bytes", re.Value)
	require.Regexp(t, `^makes the task 100\d{4} bytes as encoded; at most 1000000 allowed$`, re.Rule)
	require.Zero(t, b.emu.TaskCount())

	// The encoding adds the name, the URL, the headers and a few bytes of
	// framing: a body 1,000 bytes under the limit fits.
	res, err := b.d.Dispatch(context.Background(), req(cloudtasks.MaxTaskSize-1000))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)
}

// Without Config.Queue, every request names its queue; a cancel finds the
// queue in the outbox.
func TestNoDefaultQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openDoor(t, func(c *cloudtasks.Config) { c.Queue = "" })
	_, err := b.d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "r", TaskKey: "t", Identity: naming.Attempt(1), Task: task()})
	var re *cloudtasks.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "Task.Queue", re.Field)
	require.Equal(t, "is required: Config.Queue names no default queue", re.Rule)
	res, err := b.d.ScheduleTimer(ctx, heartbeat(b, "other"))
	require.NoError(t, err)
	got, err := b.d.CancelTimer(ctx, res.TimerID, "")
	require.NoError(t, err)
	require.Equal(t, cloudtasks.CancelDeleted, got.Outcome)
}

// Reading back right after an answer sees that answer's outcome: the
// default mode records the outcome after answering, and Latest and History
// wait for it.
func TestReadBackSeesTheAnsweredOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openDoor(t, nil)
	for i := range 50 {
		res, err := b.d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "r", TaskKey: "read", Identity: naming.Attempt(uint64(i)), Task: task()})
		require.NoError(t, err)
		latest, ok, err := b.d.Latest(ctx, res.ID)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, outbox.StatusCreated, latest.Status, "attempt %d", i)
		hist, err := b.d.History(ctx, res.ID)
		require.NoError(t, err)
		require.Len(t, hist, 2, "attempt %d: pending, then created", i)
	}
}
