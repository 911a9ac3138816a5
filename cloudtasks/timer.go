package cloudtasks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/timers"
)

// ErrTooFar matches the *RequestError of a timer due more than 30 days
// ahead, which Cloud Tasks cannot hold. timers.Arm says what to schedule
// instead.
var ErrTooFar = errors.New("timer due beyond the 30-day limit")

// TimerRequest asks for a retry timer or a heartbeat check.
type TimerRequest struct {
	// Kind is naming.KindRetry (start the next attempt of a task at At) or
	// naming.KindHeartbeat (check a running task at At). Required.
	Kind naming.Kind
	// RunID is the orchestration run. Required.
	RunID string
	// TaskKey names the task within the run. Required.
	TaskKey string
	// Next is the attempt a retry timer starts when it fires: the one after
	// the attempt that failed, for example naming.Attempt(3) once attempt 2
	// failed. When the timer fires, dispatch with Next as
	// DispatchRequest.Identity. Required for a retry; must be zero for a
	// heartbeat, which starts no attempt.
	Next naming.Identity
	// At is when the timer fires: the due time of a retry, the check time
	// of a heartbeat. It is part of the timer's name, to the second, so a
	// repeated call names the same timer only with the same At: derive it
	// from something kept, such as the failed attempt's failure time
	// through timers.Backoff.Due, never from the time of the call. A time
	// in the past fires at once; more than 30 days ahead is refused
	// (ErrTooFar). Required.
	At time.Time
	// Task is the HTTP request the timer delivers. Its ScheduleTime must be
	// zero: At sets it.
	Task Task
}

// TimerResult is the answer to ScheduleTimer.
type TimerResult struct {
	// TimerID is the internal ID, for example
	// timer:retry:run1:extract:2:1767225600.
	TimerID string
	// CloudTaskID is the Cloud Tasks task ID (t_…).
	CloudTaskID string
	// TaskName is the full task resource name.
	TaskName string
	// Outcome says what happened: created, already_existed or recovered
	// (queued from ScheduleTimerTx).
	Outcome Outcome
	// FirstRecorded is when the timer was first recorded in the outbox.
	FirstRecorded time.Time
	// Due is when the timer fires (At, to the second).
	Due time.Time
	// Skipped is true when the outbox answered without a CreateTask call
	// (see DispatchResult.Skipped).
	Skipped bool
}

// ID returns the timer ID the request names, after checking its parts.
func (r *TimerRequest) ID() (naming.ID, error) {
	if r.At.IsZero() {
		return naming.ID{}, &RequestError{Field: "At", Rule: "is required: the due or check time"}
	}
	var id naming.ID
	var err error
	switch r.Kind {
	case naming.KindRetry:
		id, err = naming.NewRetryTimer(r.RunID, r.TaskKey, r.Next, r.At)
	case naming.KindHeartbeat:
		if !r.Next.IsZero() {
			return naming.ID{}, &RequestError{Field: "Next", Value: r.Next.String(),
				Rule: "is set for a heartbeat, which starts no attempt; leave it zero"}
		}
		id, err = naming.NewHeartbeat(r.RunID, r.TaskKey, r.At)
	default:
		return naming.ID{}, &RequestError{Field: "Kind", Value: r.Kind.String(), Rule: "must be naming.KindRetry or naming.KindHeartbeat"}
	}
	if err != nil {
		return naming.ID{}, namingError(err, "Next")
	}
	return id, nil
}

// tooFar is the error for a timer beyond the service's horizon; it matches
// both ErrTooFar and ErrInvalidRequest.
type tooFar struct{ *RequestError }

func (e tooFar) Is(target error) bool { return target == ErrTooFar || e.RequestError.Is(target) }
func (e tooFar) Unwrap() error        { return e.RequestError }

// ScheduleTimer creates the timer's task, named t_… after its timer ID, to
// fire at req.At, with the outcomes, idempotency and errors of Dispatch:
// the same timer requested twice is one task. Its records go to the
// outbox's timers table.
func (d *Dispatcher) ScheduleTimer(ctx context.Context, req TimerRequest) (TimerResult, error) {
	id, task, err := d.timerTask(&req)
	if err != nil {
		return TimerResult{}, err
	}
	res, err := d.submit(ctx, id, &task)
	if err != nil {
		return TimerResult{}, err
	}
	return timerResult(res, id), nil
}

// timerTask checks req and returns its timer ID and the task to create,
// scheduled at the timer's due time.
func (d *Dispatcher) timerTask(req *TimerRequest) (naming.ID, Task, error) {
	id, err := req.ID()
	if err != nil {
		return naming.ID{}, Task{}, err
	}
	if !req.Task.ScheduleTime.IsZero() {
		return naming.ID{}, Task{}, &RequestError{Field: "Task.ScheduleTime", Value: req.Task.ScheduleTime.UTC().Format(time.RFC3339),
			Rule: "must be zero for a timer; At sets it"}
	}
	due := id.Time()
	if ahead := due.Sub(d.clock.Now()); ahead > timers.MaxAhead {
		return naming.ID{}, Task{}, tooFar{&RequestError{Field: "At", Value: due.Format(time.RFC3339),
			Rule: fmt.Sprintf("is %s ahead; Cloud Tasks schedules at most 30 days (720h) ahead: schedule a nearer timer and re-arm it when it fires (timers.Arm)",
				ahead.Round(time.Second))}}
	}
	task := req.Task
	task.ScheduleTime = due
	return id, task, nil
}

// timerResult is the answer to a timer's submission res.
func timerResult(res DispatchResult, id naming.ID) TimerResult {
	return TimerResult{
		TimerID: res.ID, CloudTaskID: res.CloudTaskID, TaskName: res.TaskName, Outcome: res.Outcome,
		FirstRecorded: res.FirstRecorded, Due: id.Time(), Skipped: res.Skipped,
	}
}
