package timers

import (
	"fmt"
	"math"
	"time"
)

// MaxAhead is how far ahead of now Cloud Tasks accepts a task's schedule
// time.
const MaxAhead = 30 * 24 * time.Hour

// Backoff computes retry due times. Zero fields take the documented
// defaults.
type Backoff struct {
	// Initial is the delay before the retry of attempt 1. Defaults to 10s.
	Initial time.Duration
	// Max caps every delay. Defaults to 1h.
	Max time.Duration
	// Multiplier grows the delay after each attempt. Defaults to 2; values
	// below 1 are refused by Due.
	Multiplier float64
}

// Defaults of Backoff.
const (
	DefaultInitial    = 10 * time.Second
	DefaultMax        = time.Hour
	DefaultMultiplier = 2.0
)

// WithDefaults returns b with every zero field at its default.
func (b Backoff) WithDefaults() Backoff {
	if b.Initial == 0 {
		b.Initial = DefaultInitial
	}
	if b.Max == 0 {
		b.Max = DefaultMax
	}
	if b.Multiplier == 0 {
		b.Multiplier = DefaultMultiplier
	}
	return b
}

// Delay returns the wait before the retry of attempt n (1 for the first
// attempt): Initial·Multiplier^(n-1), capped at Max. An error names the
// field that is out of range.
func (b Backoff) Delay(n uint64) (time.Duration, error) {
	b = b.WithDefaults()
	switch {
	case n == 0:
		return 0, fmt.Errorf("timers: attempt 0 has no retry delay; attempts are numbered from 1")
	case b.Initial < 0:
		return 0, fmt.Errorf("timers: Backoff.Initial %s is negative", b.Initial)
	case b.Max < b.Initial:
		return 0, fmt.Errorf("timers: Backoff.Max %s is below Backoff.Initial %s", b.Max, b.Initial)
	case b.Multiplier < 1 || math.IsNaN(b.Multiplier) || math.IsInf(b.Multiplier, 0):
		return 0, fmt.Errorf("timers: Backoff.Multiplier %v is not a number of at least 1", b.Multiplier)
	}
	return exponential(b.Initial, b.Max, b.Multiplier, n), nil
}

// Due returns when the retry of attempt n, which failed at failedAt, is
// due, to the second (a timer is named to the second, so the same failure
// always names the same timer). The retry timer starts attempt n+1: its
// cloudtasks.TimerRequest has Next naming.Attempt(n+1) and At this time.
// Pass the failure time the orchestrator kept, not the time of the call,
// so that a call repeated after a restart names the same timer.
func (b Backoff) Due(failedAt time.Time, n uint64) (time.Time, error) {
	d, err := b.Delay(n)
	if err != nil {
		return time.Time{}, err
	}
	return failedAt.Add(d).Truncate(time.Second).UTC(), nil
}

// Heartbeat computes the check times of a running task.
type Heartbeat struct {
	// Every is the time between checks. Required: at least a second, since
	// checks are named to the second.
	Every time.Duration
}

// Next returns the first check time strictly after after that a check can
// be named by: a whole Every step from started, to the second (a check is
// named to the second). When started has a fraction of a second, a step
// can land on after itself once truncated, so the step after it is
// returned. An error names a bad Every or a started after after.
func (h Heartbeat) Next(started, after time.Time) (time.Time, error) {
	switch {
	case h.Every < time.Second:
		return time.Time{}, fmt.Errorf("timers: Heartbeat.Every %s is below 1s; checks are named to the second", h.Every)
	case started.After(after):
		return time.Time{}, fmt.Errorf("timers: started %s is after %s", started.UTC().Format(time.RFC3339), after.UTC().Format(time.RFC3339))
	}
	steps := after.Sub(started)/h.Every + 1
	next := started.Add(steps * h.Every).Truncate(time.Second)
	if !next.After(after) {
		next = started.Add((steps + 1) * h.Every).Truncate(time.Second)
	}
	return next.UTC(), nil
}

// Arm says what to schedule, at now, for a timer meant to fire at want:
// want itself when it is within MaxAhead, or else a timer at the horizon
// (now plus MaxAhead less a minute of margin, to the second) with rearm
// true: when that one fires, call Arm again with the same want.
func Arm(want, now time.Time) (at time.Time, rearm bool) {
	if want.Sub(now) <= MaxAhead {
		return want, false
	}
	return now.Add(MaxAhead - time.Minute).Truncate(time.Second).UTC(), true
}
