package timers_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/timers"
)

const queue = "projects/proj/locations/europe-west1/queues/default"

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type bundle struct {
	emu   *emulator.Server
	box   *outbox.Outbox
	s     *timers.Scheduler
	clock *clockwork.FakeClock
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(now)
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock, Queues: []emulator.QueueConfig{{Name: queue}}})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	client, err := emu.NewClient(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	box, err := outbox.Open(ctx, outbox.Options{Root: t.TempDir(), ProcessorUUID: uuid.Must(uuid.NewV7()), Clock: clock})
	require.NoError(t, err)
	t.Cleanup(func() { box.Close() })
	// Strict: these tests read each outcome record right after the call.
	d, err := cloudtasks.NewDispatcher(ctx, &cloudtasks.Config{
		Project: "proj", Location: "europe-west1", Queue: "default", Client: client, Outbox: box, Clock: clock,
		Durability: cloudtasks.DurabilityStrict,
	})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	return &bundle{emu: emu, box: box, s: timers.New(d), clock: clock}
}

func retry(at time.Time) timers.TimerRequest {
	return timers.TimerRequest{
		Kind: naming.KindRetry, RunID: "run1", TaskKey: "extract", Identity: naming.Identity{Number: 2}, At: at,
		Task: cloudtasks.Task{URL: "https://worker.example/retry", Body: []byte(`{"attempt":2}`)},
	}
}

func TestScheduleRetryTimer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	due := now.Add(90*time.Minute + 500*time.Millisecond)
	res, err := b.s.ScheduleTimer(ctx, retry(due))
	require.NoError(t, err)
	want := "timer:retry:run1:extract:2:" + "1772371800"
	require.Equal(t, want, res.TimerID)
	require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)
	require.Equal(t, due.Truncate(time.Second), res.Due)
	require.Regexp(t, `^t_[a-z2-7]{26}$`, res.CloudTaskID)

	tasks := b.emu.Tasks(queue)
	require.Len(t, tasks, 1)
	require.Equal(t, res.TaskName, tasks[0].GetName())
	require.Equal(t, res.Due, tasks[0].GetScheduleTime().AsTime())
	require.Equal(t, want, tasks[0].GetHttpRequest().GetHeaders()[cloudtasks.HeaderIdempotencyKey])

	again, err := b.s.ScheduleTimer(ctx, retry(due))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeAlreadyExisted, again.Outcome)
	require.True(t, again.Skipped)
	require.Len(t, b.emu.Tasks(queue), 1)

	recs, err := b.box.Lookup(ctx, outbox.Query{ID: want, History: true})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, outbox.TableTimers, recs[1].Table)
	require.Equal(t, "retry", recs[1].Kind)
	require.Equal(t, outbox.StatusCreated, recs[1].Status)
	require.Equal(t, res.Due, recs[1].DueAt)

	// Another payload for the same timer is a conflict.
	other := retry(due)
	other.Task.Body = []byte(`{"attempt":3}`)
	_, err = b.s.ScheduleTimer(ctx, other)
	require.ErrorIs(t, err, cloudtasks.ErrPayloadConflict)
}

func TestScheduleHeartbeatAndPastDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.s.ScheduleTimer(ctx, timers.TimerRequest{
		Kind: naming.KindHeartbeat, RunID: "run1", TaskKey: "extract", At: now.Add(-time.Minute),
		Task: cloudtasks.Task{URL: "https://worker.example/heartbeat", Method: "GET"},
	})
	require.NoError(t, err)
	require.Equal(t, "timer:heartbeat:run1:extract:1772366340", res.TimerID)
	tasks := b.emu.Tasks(queue)
	require.Len(t, tasks, 1)
	// Past due: no schedule time was asked, so it fires at once.
	require.False(t, tasks[0].GetScheduleTime().AsTime().After(now))
}

func TestScheduleTimerLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.s.ScheduleTimer(ctx, retry(now.Add(31*24*time.Hour)))
	require.ErrorIs(t, err, timers.ErrTooFar)
	require.ErrorIs(t, err, cloudtasks.ErrInvalidRequest)
	require.EqualError(t, err, `cloudtasks: At "2026-04-01T12:00:00Z" is 744h0m0s ahead; Cloud Tasks schedules at most 30 days (720h) ahead: schedule a nearer timer and re-arm it when it fires`)

	_, err = b.s.ScheduleTimer(ctx, retry(now.Add(30*24*time.Hour)))
	require.NoError(t, err)

	tests := []struct {
		name  string
		req   timers.TimerRequest
		field string
	}{
		{"no time", timers.TimerRequest{Kind: naming.KindRetry, RunID: "r", TaskKey: "t"}, "At"},
		{"dispatch kind", timers.TimerRequest{Kind: naming.KindDispatch, RunID: "r", TaskKey: "t", At: now}, "Kind"},
		{"bad run", timers.TimerRequest{Kind: naming.KindHeartbeat, RunID: "a:b", TaskKey: "t", At: now}, "RunID"},
		{"schedule time set", func() timers.TimerRequest { r := retry(now); r.Task.ScheduleTime = now; return r }(), "Task.ScheduleTime"},
	}
	for _, tt := range tests {
		_, err := b.s.ScheduleTimer(ctx, tt.req)
		var re *cloudtasks.RequestError
		require.ErrorAs(t, err, &re, tt.name)
		require.Equal(t, tt.field, re.Field, tt.name)
	}
}

func TestCancelTimer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.s.ScheduleTimer(ctx, retry(now.Add(time.Hour)))
	require.NoError(t, err)

	c, err := b.s.CancelTimer(ctx, res.TimerID, "")
	require.NoError(t, err)
	require.True(t, c.Deleted)
	require.Empty(t, b.emu.Tasks(queue))

	// Already gone: still a success.
	c, err = b.s.CancelTimer(ctx, res.TimerID, "")
	require.NoError(t, err)
	require.False(t, c.Deleted)

	recs, err := b.box.Lookup(ctx, outbox.Query{ID: res.TimerID, History: true})
	require.NoError(t, err)
	var got []outbox.Status
	for _, r := range recs {
		got = append(got, r.Status)
	}
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusCreated, outbox.StatusCancelled, outbox.StatusCancelled}, got)
	require.Equal(t, recs[0].CreatedAt, recs[3].CreatedAt)

	_, err = b.s.CancelTimer(ctx, "dispatch:run1:extract:1", "")
	var re *cloudtasks.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "TimerID", re.Field)
}
