package worker

import (
	"errors"
	"fmt"
	"time"
)

// Sentinels that the errors of this package match with errors.Is.
var (
	// ErrInvalidConfig matches every error New and NewSQLInbox return for a
	// bad configuration; the *ConfigError names the field.
	ErrInvalidConfig = errors.New("invalid worker config")
	// ErrRejected matches a *HeaderError: a request whose Cloud Tasks or
	// ctdispatch headers are missing, malformed or do not fit together.
	ErrRejected = errors.New("delivery rejected")
	// ErrBusy is returned by an Inbox when another delivery of the same
	// key held it for longer than the wait allowed. The worker answers 500,
	// so Cloud Tasks delivers again later.
	ErrBusy = errors.New("another delivery of this key is in progress")
)

// ConfigError names a configuration field that is wrong, its value and the
// rule it breaks.
type ConfigError struct {
	// Field is the field, for example "Config.ServiceAccounts".
	Field string
	// Value is the offending value as text.
	Value string
	// Rule says what is allowed.
	Rule string
}

// Error says which field is wrong, its value and the rule.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("worker: %s %s %s", e.Field, e.Value, e.Rule)
}

// Is makes a ConfigError match ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// HeaderError says which request header made a delivery unacceptable, with
// its value and the rule it breaks.
type HeaderError struct {
	// Header is the header's canonical name, for example "Idempotency-Key".
	Header string
	// Value is what the request carried ("" when the header is absent).
	Value string
	// Rule says what was expected.
	Rule string
}

// Error says which header is wrong, its value and the rule.
func (e *HeaderError) Error() string {
	return fmt.Sprintf("header %s %q %s", e.Header, e.Value, e.Rule)
}

// Is makes a HeaderError match ErrRejected.
func (e *HeaderError) Is(target error) bool { return target == ErrRejected }

// PermanentError marks a handler's failure that no retry can mend. The
// worker answers 200 so Cloud Tasks stops delivering the task, and the
// inbox records the key as failed.
type PermanentError struct {
	// Err is the cause.
	Err error
}

// Error is the cause's message marked permanent.
func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so the worker treats it as a permanent failure:
// answered 200 (Cloud Tasks does not retry), recorded as failed by the
// inbox, logged at error level. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err is or wraps a *PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// SlowDownError asks Cloud Tasks to slow the queue down: the worker answers
// 503 with Retry-After, which makes the service lower the queue's dispatch
// rate and wait at least RetryAfter before this task's next attempt.
type SlowDownError struct {
	// Err is the cause.
	Err error
	// RetryAfter is sent in whole seconds, rounded up, at least 1.
	RetryAfter time.Duration
}

// Error is the cause's message with the delay asked for.
func (e *SlowDownError) Error() string {
	return fmt.Sprintf("slow down (retry after %s): %v", e.RetryAfter, e.Err)
}

// Unwrap returns the cause.
func (e *SlowDownError) Unwrap() error { return e.Err }

// SlowDown wraps err so the worker answers 503 with a Retry-After of
// retryAfter: the delivery failed, will be retried, and the queue should
// send less (for example because a downstream service is overloaded). Use
// it only for that: every other retryable failure is a plain error, which
// the worker answers with 500 and Cloud Tasks retries under the queue's
// backoff without throttling the queue. SlowDown(nil, d) is nil.
func SlowDown(err error, retryAfter time.Duration) error {
	if err == nil {
		return nil
	}
	return &SlowDownError{Err: err, RetryAfter: retryAfter}
}

// panicError is a handler's recovered panic, retried like any error.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.value) }
