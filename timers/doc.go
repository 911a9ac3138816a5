// Package timers schedules retry timers and heartbeat checks as named Cloud
// Tasks, on the core of a cloudtasks.Dispatcher.
//
// # Timers
//
// A retry timer fires the retry of an attempt at its due time; its ID is
// timer:retry:{run}:{task}:{attempt}:{due_epoch}. A heartbeat check fires at
// a check time to see whether a running task is still alive; its ID is
// timer:heartbeat:{run}:{task}:{check_epoch}. Both are named to the second,
// and their Cloud Tasks IDs start with t_. The task's schedule_time is the
// due or check time.
//
// # Idempotency
//
// ScheduleTimer has the outcomes of Dispatch (created, already_existed,
// recovered) and its guarantees: the same timer requested twice, from one
// process or several, is one task; the same timer ID with another payload
// is a conflict. Records go to the outbox's timers table with due_at.
//
// # Limits
//
// Cloud Tasks holds a task at most 30 days before it fires. A timer due
// further ahead is refused with an error matching ErrTooFar; schedule a
// nearer timer and re-arm it when it fires. A due time in the past fires at
// once.
//
// # Errors
//
// Bad input (a zero time, a due time past the 30-day limit, an invalid
// component) is refused before any call, with an error naming the value and
// the rule; ErrTooFar matches the limit. Every other error is the
// dispatcher's and matches the same sentinels (cloudtasks.ErrCreateFailed,
// ErrGaveUp, ErrPayloadConflict, …) through errors.Is.
//
// # Observability
//
// Timers go through the dispatcher, so they share its slog logger and
// OpenTelemetry meter: outcomes are counted with kind retry or heartbeat,
// and every log line carries the timer ID.
//
// # Cancelling
//
// CancelTimer deletes the task and records the timer as cancelled. A task
// already gone (fired, or cancelled before) is a success. Cloud Tasks keeps
// a deleted name reserved for a while (up to about a day), so a cancelled
// timer ID scheduled again soon may answer already_existed without a task;
// use a new due time instead.
package timers
