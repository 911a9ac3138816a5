package timers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/naming"
)

// ErrTooFar matches a *cloudtasks.RequestError for a timer due more than
// 30 days ahead, which Cloud Tasks cannot hold. Schedule a nearer timer and
// re-arm it when it fires.
var ErrTooFar = errors.New("timer due beyond the 30-day limit")

// Scheduler schedules and cancels timers on a Dispatcher, so timers share
// its client, outbox, retries and metrics.
type Scheduler struct {
	d *cloudtasks.Dispatcher
}

// New returns a Scheduler over d. Closing d is the caller's business.
func New(d *cloudtasks.Dispatcher) *Scheduler { return &Scheduler{d: d} }

// TimerRequest asks for a retry timer or a heartbeat check.
type TimerRequest struct {
	// Kind is naming.KindRetry (fire a retry of an attempt at At) or
	// naming.KindHeartbeat (check a running task at At). Required.
	Kind naming.Kind
	// RunID is the orchestration run. Required.
	RunID string
	// TaskKey names the task within the run. Required.
	TaskKey string
	// Identity fills the attempt slot of a retry timer (the attempt to
	// retry); ignored for heartbeats.
	Identity naming.Identity
	// At is when the timer fires: the due time of a retry, the check time
	// of a heartbeat. It is named to the second; a time in the past fires at
	// once; more than 30 days ahead is refused. Required.
	At time.Time
	// Task is the HTTP request the timer delivers. Its ScheduleTime must be
	// zero: At sets it.
	Task cloudtasks.Task
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
	// Outcome says what happened: created, already_existed or recovered.
	Outcome cloudtasks.Outcome
	// FirstRecorded is when the timer was first recorded in the outbox.
	FirstRecorded time.Time
	// Due is when the timer fires (At, to the second).
	Due time.Time
	// Skipped is true when the outbox answered without a Cloud Tasks call.
	Skipped bool
}

// ID returns the timer ID the request names, after checking its parts.
func (r *TimerRequest) ID() (naming.ID, error) {
	if r.At.IsZero() {
		return naming.ID{}, &cloudtasks.RequestError{Field: "At", Rule: "is required: the due or check time"}
	}
	var id naming.ID
	var err error
	switch r.Kind {
	case naming.KindRetry:
		var attempt string
		if attempt, err = r.Identity.Attempt(r.TaskKey); err == nil {
			id, err = naming.NewRetryTimer(r.RunID, r.TaskKey, attempt, r.At)
		}
	case naming.KindHeartbeat:
		id, err = naming.NewHeartbeat(r.RunID, r.TaskKey, r.At)
	default:
		return naming.ID{}, &cloudtasks.RequestError{Field: "Kind", Value: r.Kind.String(), Rule: "must be retry or heartbeat"}
	}
	if err != nil {
		var ne *naming.Error
		if errors.As(err, &ne) {
			return naming.ID{}, &cloudtasks.RequestError{Field: fieldOf(ne.Component), Value: ne.Value, Rule: ne.Rule, Err: err}
		}
		return naming.ID{}, &cloudtasks.RequestError{Field: "ID", Rule: err.Error(), Err: err}
	}
	return id, nil
}

func fieldOf(component string) string {
	switch component {
	case "run_id":
		return "RunID"
	case "task_key":
		return "TaskKey"
	case "attempt", "strategy":
		return "Identity"
	case "idempotency key":
		return "Identity.Key"
	case "due_epoch", "check_epoch":
		return "At"
	}
	return "ID"
}

// tooFar is the error for a timer beyond the service's horizon; it matches
// both ErrTooFar and cloudtasks.ErrInvalidRequest.
type tooFar struct{ *cloudtasks.RequestError }

func (e tooFar) Is(target error) bool { return target == ErrTooFar || e.RequestError.Is(target) }
func (e tooFar) Unwrap() error        { return e.RequestError }

// ScheduleTimer creates the timer's task, named t_… after its timer ID, to
// fire at req.At, with the same outcomes and idempotency as Dispatch: the
// same timer requested twice is one task. Its records go to the outbox's
// timers table.
func (s *Scheduler) ScheduleTimer(ctx context.Context, req TimerRequest) (TimerResult, error) {
	id, err := req.ID()
	if err != nil {
		return TimerResult{}, err
	}
	if !req.Task.ScheduleTime.IsZero() {
		return TimerResult{}, &cloudtasks.RequestError{Field: "Task.ScheduleTime", Value: req.Task.ScheduleTime.UTC().Format(time.RFC3339),
			Rule: "must be zero for a timer; At sets it"}
	}
	due := id.Time()
	if ahead := due.Sub(s.d.Now()); ahead > cloudtasks.MaxScheduleAhead {
		return TimerResult{}, tooFar{&cloudtasks.RequestError{Field: "At", Value: due.Format(time.RFC3339),
			Rule: fmt.Sprintf("is %s ahead; Cloud Tasks schedules at most 30 days (720h) ahead: schedule a nearer timer and re-arm it when it fires",
				ahead.Round(time.Second))}}
	}
	task := req.Task
	task.ScheduleTime = due
	res, err := s.d.Submit(ctx, id, task)
	if err != nil {
		return TimerResult{}, err
	}
	return TimerResult{
		TimerID: res.ID, CloudTaskID: res.CloudTaskID, TaskName: res.TaskName, Outcome: res.Outcome,
		FirstRecorded: res.FirstRecorded, Due: due, Skipped: res.Skipped,
	}, nil
}

// CancelTimer deletes the timer's task from queue (empty: the dispatcher's
// default queue) and records the timer as cancelled. A task already gone
// (fired, or cancelled before) is a success with Deleted false.
func (s *Scheduler) CancelTimer(ctx context.Context, timerID, queue string) (cloudtasks.CancelResult, error) {
	id, err := naming.Parse(timerID)
	if err != nil {
		return cloudtasks.CancelResult{}, &cloudtasks.RequestError{Field: "TimerID", Value: timerID, Rule: err.Error(), Err: err}
	}
	if !id.IsTimer() {
		return cloudtasks.CancelResult{}, &cloudtasks.RequestError{Field: "TimerID", Value: timerID,
			Rule: `is not a timer ID; allowed: "timer:retry:…" or "timer:heartbeat:…"`}
	}
	return s.d.Cancel(ctx, id, queue)
}
