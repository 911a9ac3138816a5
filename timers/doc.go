// Package timers is the timer policy of orchestration code: when the next
// retry of a failed attempt is due, when to check a running task's
// heartbeat, and how to reach a time further ahead than Cloud Tasks holds
// a task. It makes no calls and keeps no state: the dispatcher
// (cloudtasks.Dispatcher.ScheduleTimer) turns its answers into named
// tasks.
//
// # Retries
//
// Backoff gives the due time of the retry of attempt n after a failure: a
// delay that starts at Initial and is multiplied by Multiplier after each
// attempt, capped at Max, with no jitter, so the same failure always names
// the same timer (its ID carries the due time) and a repeated schedule
// call is deduplicated, provided the failure time is one that was kept.
// The timer starts the next attempt, n+1.
//
// # Heartbeats
//
// Heartbeat gives the check times of a running task: every Every after it
// started, to the second. The check time names the timer, so each check is
// one task, and Next never gives back the check it was asked to go past,
// also for a start with a fraction of a second: after a cancelled check,
// Next gives the one after it, under a new name.
//
// # The 30-day horizon
//
// Cloud Tasks holds a task at most MaxAhead (30 days) before it fires.
// Arm says what to schedule for a time further ahead: a timer at the
// horizon that, when it fires, arms the next one, until the time is near.
package timers
