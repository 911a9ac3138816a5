package cloudtasks

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrInvalidConfig matches every error NewDispatcher returns for a bad
	// Config; the *ConfigError names the field.
	ErrInvalidConfig = errors.New("invalid dispatcher config")
	// ErrInvalidRequest matches every *RequestError: a request the service
	// would refuse, caught before any I/O.
	ErrInvalidRequest = errors.New("invalid dispatch request")
	// ErrPayloadConflict matches a *ConflictError: the ID was recorded with a
	// different payload.
	ErrPayloadConflict = errors.New("payload conflicts with the recorded one")
	// ErrNotOwner is returned when EnforceOwnership is on and the ID's
	// pending record belongs to another processor.
	ErrNotOwner = errors.New("dispatch owned by another processor")
	// ErrCreateFailed matches a *CallError of CreateTask with a permanent
	// (non-retryable) code: the outbox records the attempt as failed.
	ErrCreateFailed = errors.New("create task failed")
	// ErrCancelFailed matches a *CallError of DeleteTask with a code other
	// than NOT_FOUND, after transient ones were retried: the task may
	// still exist and nothing was recorded.
	ErrCancelFailed = errors.New("delete task failed")
	// ErrGaveUp matches a *CallError of CreateTask returned after transient
	// errors outlasted the retry policy: the outcome is unknown and the
	// record stays pending for Recover or a repeated call.
	ErrGaveUp = errors.New("gave up retrying")
	// ErrNameHeld matches a *NameHeldError: the ID's task was deleted by a
	// Cancel, and Cloud Tasks refuses its name until the hold ends.
	ErrNameHeld = errors.New("task name held after a cancel")
	// ErrNotStarted matches a *WaitError for a context that had ended
	// before anything was started: no call was made, nothing recorded.
	ErrNotStarted = errors.New("context ended before the work started")
	// ErrStoppedWaiting matches a *WaitError for a context that ended while
	// the work went on: it goes on and records its outcome.
	ErrStoppedWaiting = errors.New("stopped waiting; the work goes on")
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("dispatcher closed")
	// ErrOutboxUnavailable matches an *OutboxError: the outbox could not
	// be read or could not record the call, so no answer (or, for a cancel,
	// no record of it) is given; see OutboxError for what each Op means.
	ErrOutboxUnavailable = errors.New("outbox unavailable")
	// ErrIndeterminate matches an *IndeterminateError: what the outbox
	// and Cloud Tasks can tell does not decide the answer, so none is
	// given rather than a guess.
	ErrIndeterminate = errors.New("outcome indeterminate")
)

// Unknown names what an *IndeterminateError could not find out.
type Unknown string

// The things an answer may depend on and the dispatcher may be unable to
// know.
const (
	// UnknownWriteOrder: two processes wrote the same version of the ID's
	// record without seeing each other (outbox.ErrConcurrentWrites), and
	// GetTask found no task that would settle it, so whether the ID was
	// last cancelled or dispatched has no answer that does not trust a
	// clock.
	UnknownWriteOrder Unknown = "write_order"
	// UnknownTaskExists: the outbox says the task was created, but it
	// cannot read every process's records (a Parquet outbox on a bucket
	// sees others' cancels only once published), and GetTask, which would
	// settle it, failed.
	UnknownTaskExists Unknown = "task_exists"
	// UnknownDeletion: the outbox says the task was created, but it cannot
	// read every process's records; GetTask found no task, after its
	// schedule time, and no completed delivery is recorded: whether the
	// task ran or a cancel not yet readable deleted it is unknown.
	UnknownDeletion Unknown = "deletion"
	// UnknownPendingRecord: the outbox lost its answer to the pending
	// record written before the create call (outbox.ErrKeptUnknown: a
	// database connection lost while the record committed), so whether
	// the ID is recorded pending is unknown. No Cloud Tasks call was made.
	// Repeat the call: it reads what the outbox kept and goes on from it.
	// Err is the *OutboxError, so the error matches ErrOutboxUnavailable
	// too.
	UnknownPendingRecord Unknown = "pending_record"
)

// IndeterminateError is the answer to a call whose true outcome cannot be
// known from the outbox and Cloud Tasks: Unknown names what is missing.
// Nothing was created by the call. It matches ErrIndeterminate and
// unwraps to its cause (for UnknownWriteOrder an
// *outbox.ConcurrentWritesError naming the records; for UnknownTaskExists
// GetTask's error; for UnknownPendingRecord the *OutboxError, so it
// matches ErrOutboxUnavailable as well).
type IndeterminateError struct {
	// ID is the internal ID.
	ID string
	// Unknown names what could not be found out.
	Unknown Unknown
	// Err is the cause.
	Err error
}

func (e *IndeterminateError) Error() string {
	cause := strings.TrimPrefix(fmt.Sprint(e.Err), "cloudtasks: "+e.ID+": ") // said once is enough
	return fmt.Sprintf("cloudtasks: %s: outcome indeterminate (%s unknown): %s", e.ID, e.Unknown, cause)
}

// Is makes an IndeterminateError match ErrIndeterminate.
func (e *IndeterminateError) Is(target error) bool { return target == ErrIndeterminate }

// Unwrap returns the cause.
func (e *IndeterminateError) Unwrap() error { return e.Err }

// ConfigError names the Config field that is wrong, its value and the rule.
type ConfigError struct {
	// Field is the Config field, for example "Project", or "outbox" for
	// the outbox passed to NewDispatcher, which is not a Config field.
	Field string
	// Value is the offending value as text; for the outbox, its type
	// ("*outbox.Memory") or "nil".
	Value string
	// Rule says what is allowed.
	Rule string
}

// fieldOutbox is ConfigError.Field for the outbox passed to NewDispatcher.
const fieldOutbox = "outbox"

func (e *ConfigError) Error() string {
	if e.Field == fieldOutbox {
		return fmt.Sprintf("cloudtasks: the outbox passed to NewDispatcher (%s) %s", e.Value, e.Rule)
	}
	return fmt.Sprintf("cloudtasks: Config.%s %q %s", e.Field, e.Value, e.Rule)
}

// Is makes a ConfigError match ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// RequestError names the request field that breaks a service limit, its
// value (shortened when long; never a body) and the rule.
type RequestError struct {
	// Field is the request field, for example "URL" or "ScheduleTime".
	Field string
	// Value is the offending value as text, or a size for bodies and headers.
	Value string
	// Rule says what is allowed.
	Rule string
	// Err is an underlying cause (for example a *naming.Error), if any.
	Err error
}

func (e *RequestError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("cloudtasks: %s %s", e.Field, e.Rule)
	}
	return fmt.Sprintf("cloudtasks: %s %q %s", e.Field, e.Value, e.Rule)
}

// Is makes a RequestError match ErrInvalidRequest.
func (e *RequestError) Is(target error) bool { return target == ErrInvalidRequest }

// Unwrap returns the underlying cause, if any.
func (e *RequestError) Unwrap() error { return e.Err }

// ConflictError reports an ID already recorded with a different payload
// fingerprint. Reusing an ID for different work is a bug in the caller, so
// it is reported rather than answered as a duplicate.
type ConflictError struct {
	// ID is the internal ID.
	ID string
	// Recorded is the fingerprint in the outbox (or of the call in flight).
	Recorded string
	// Given is the fingerprint of this call's payload.
	Given string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("cloudtasks: %s: payload sha256 %.12s… differs from the recorded %.12s…; use a new attempt for a new payload",
		e.ID, e.Given, e.Recorded)
}

// Is makes a ConflictError match ErrPayloadConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrPayloadConflict }

// OwnershipError reports a pending record of another processor that this
// dispatcher may not take over because EnforceOwnership is on.
type OwnershipError struct {
	// ID is the internal ID.
	ID string
	// Owner is the processor UUID on the pending record.
	Owner string
}

func (e *OwnershipError) Error() string {
	return fmt.Sprintf("cloudtasks: %s is pending under processor %s and ownership is enforced", e.ID, e.Owner)
}

// Is makes an OwnershipError match ErrNotOwner.
func (e *OwnershipError) Is(target error) bool { return target == ErrNotOwner }

// CallError is a failed Cloud Tasks call for one ID. It unwraps to the gRPC
// status error, so status.FromError, status.Code and errors.As work on it.
// A CreateTask error matches ErrCreateFailed (permanent code) or ErrGaveUp
// (transient codes until the policy ran out); a DeleteTask error matches
// ErrCancelFailed.
type CallError struct {
	// ID is the internal ID.
	ID string
	// Method is the RPC: "CreateTask" or "DeleteTask".
	Method string
	// Code is the gRPC code of the last error.
	Code codes.Code
	// Calls is how many calls were made.
	Calls int
	// Transient is true when the last error was transient (so the outcome
	// is unknown).
	Transient bool
	// Err is the last error (a gRPC status error or a context error).
	Err error
}

func (e *CallError) Error() string {
	verb := "failed"
	if e.Transient {
		verb = fmt.Sprintf("gave up after %d calls", e.Calls)
	}
	return fmt.Sprintf("cloudtasks: %s %s %s: %s: %v", e.Method, e.ID, verb, e.Code, e.Err)
}

// Unwrap returns the last error.
func (e *CallError) Unwrap() error { return e.Err }

// GRPCStatus returns the status of the last error, so status.FromError
// finds it directly.
func (e *CallError) GRPCStatus() *status.Status {
	if s, ok := status.FromError(e.Err); ok {
		return s
	}
	return status.New(e.Code, e.Err.Error())
}

// Is makes a CallError match ErrCancelFailed, ErrGaveUp or
// ErrCreateFailed.
func (e *CallError) Is(target error) bool {
	switch {
	case e.Method == "DeleteTask":
		return target == ErrCancelFailed
	case e.Transient:
		return target == ErrGaveUp
	}
	return target == ErrCreateFailed
}

// NameHeldError reports an ID whose task a Cancel deleted and that was
// dispatched or scheduled again while Cloud Tasks still holds the deleted
// task's name: no task exists and none can be created under that name
// before about HeldUntil. Dispatch it under a new attempt instead (a
// heartbeat, which has no attempt: schedule a later check time), or again
// after HeldUntil. It matches ErrNameHeld.
type NameHeldError struct {
	// ID is the internal ID.
	ID string
	// CancelledAt is when the outbox recorded the delete; zero when no
	// record of it was visible and GetTask found the task gone before its
	// schedule time, while CreateTask said its name was taken or the
	// outbox's record said it was created.
	CancelledAt time.Time
	// HeldUntil is CancelledAt plus Config.NameHold (when CancelledAt is
	// zero, the time of the answer plus NameHold): about when the name is
	// free again.
	HeldUntil time.Time
}

func (e *NameHeldError) Error() string {
	if e.CancelledAt.IsZero() {
		return fmt.Sprintf("cloudtasks: %s: its task is gone before its schedule time (GetTask: NOT_FOUND), so it was deleted, and Cloud Tasks holds its name (CreateTask: ALREADY_EXISTS), until at most about %s; no task exists: %s, or try again after then",
			e.ID, e.HeldUntil.UTC().Format(time.RFC3339), e.advice())
	}
	return fmt.Sprintf("cloudtasks: %s: its task was deleted by a cancel at %s and Cloud Tasks holds the name until about %s; no task exists: %s, or try again after then",
		e.ID, e.CancelledAt.UTC().Format(time.RFC3339), e.HeldUntil.UTC().Format(time.RFC3339), e.advice())
}

// advice says what else names a task: a new attempt, or for a heartbeat,
// which has none, another check time.
func (e *NameHeldError) advice() string {
	if id, err := naming.Parse(e.ID); err == nil && id.Kind() == naming.KindHeartbeat {
		return "schedule a later check time (timers.Heartbeat.Next after this one)"
	}
	return "use a new attempt"
}

// Is makes a NameHeldError match ErrNameHeld.
func (e *NameHeldError) Is(target error) bool { return target == ErrNameHeld }

// OutboxError reports a call that got no answer, or an incomplete one,
// because the outbox failed. It matches ErrOutboxUnavailable and unwraps
// to the outbox's error. When that error matches outbox.ErrKeptUnknown,
// the outbox lost its answer and may have kept the record all the same;
// for the pending record before the call, the OutboxError comes inside an
// *IndeterminateError (UnknownPendingRecord).
//
// Op says what the outbox could not do. For OpRecordPending, when
// BeforeCall is true no Cloud Tasks call was made; when it is false (the
// pending record was written at the same time as the call, see
// DurabilityOverlapped) the task may exist, and repeating the call once the
// outbox works again is safe, because the task name deduplicates it. For
// OpRead and OpListPending no Cloud Tasks call was made. For OpRecordCancel
// the cancel's DeleteTask was made (its answer is in the CancelResult
// returned beside the error) but not recorded; for OpRecordOutcome (strict
// mode) the create call was made and its outcome not recorded.
type OutboxError struct {
	// ID is the internal ID; empty for OpListPending. For a statement of
	// a DispatchManyTx batch, its first ID and how many more.
	ID string
	// Op is what the outbox failed to do.
	Op OutboxOp
	// BeforeCall is true when the failure stopped the call before any
	// Cloud Tasks request.
	BeforeCall bool
	// Err is the outbox's error.
	Err error
}

// OutboxOp names what the outbox failed to do in an *OutboxError.
type OutboxOp string

// The outbox operations an OutboxError reports.
const (
	// OpRecordPending is the pending record written before or beside a
	// create call.
	OpRecordPending OutboxOp = "record the pending state"
	// OpRead is reading an ID's latest record, before any call.
	OpRead OutboxOp = "read the ID's record"
	// OpRecordOutcome is the outcome record a strict-mode create waits
	// for: the call was made, its outcome is not recorded.
	OpRecordOutcome OutboxOp = "record the outcome"
	// OpRecordCancel is the cancelled record written after DeleteTask.
	OpRecordCancel OutboxOp = "record the cancel"
	// OpListPending is Recover's listing of stale pending records.
	OpListPending OutboxOp = "list the pending records"
	// OpClaimIntents is a relay's claim of committed intents, or its
	// removal of one it finished.
	OpClaimIntents OutboxOp = "claim or drop intents"
)

func (e *OutboxError) Error() string {
	var when string
	switch {
	case e.Op == OpRecordCancel:
		when = "the cancel's DeleteTask was made"
	case e.Op == OpRecordOutcome:
		when = "the create call was made; repeat it to record the outcome"
	case e.Op == OpClaimIntents && !e.BeforeCall:
		when = "the outcome is recorded; a later relay pass drops the intent"
	case e.Op == OpRecordPending && !e.BeforeCall:
		when = "the task may exist; repeat the call once the outbox works"
	default:
		when = "the Cloud Tasks call was not made"
	}
	subject := e.ID
	if subject == "" && e.Op == OpClaimIntents {
		subject = "relay"
	} else if subject == "" {
		subject = "recover"
	}
	if errors.Is(e.Err, outbox.ErrKeptUnknown) {
		return fmt.Sprintf("cloudtasks: %s: unknown whether the outbox could %s, whose answer was lost (%s): %v", subject, e.Op, when, e.Err)
	}
	return fmt.Sprintf("cloudtasks: %s: outbox could not %s (%s): %v", subject, e.Op, when, e.Err)
}

// Is makes an OutboxError match ErrOutboxUnavailable.
func (e *OutboxError) Is(target error) bool { return target == ErrOutboxUnavailable }

// Unwrap returns the outbox's error.
func (e *OutboxError) Unwrap() error { return e.Err }

// WaitError is returned to a caller whose context ended before it had an
// answer. When Started is false nothing was started for the call (its
// context had ended already, or ended while another operation on the same
// ID ran): it matches ErrNotStarted. When Started is true the work for its
// ID (its own or that of a concurrent identical call) goes on, bounded by
// RetryPolicy.MaxElapsed, and records its outcome; repeat the call to
// learn it: it matches ErrStoppedWaiting. Either way it unwraps to the
// context's error, so errors.Is(err, context.DeadlineExceeded) works too.
type WaitError struct {
	// ID is the internal ID; empty for Recover.
	ID string
	// Op is what was waited for: "create", "cancel" or "recover".
	Op string
	// Started is true when the work had started and goes on.
	Started bool
	// Err is the caller's context error.
	Err error
}

func (e *WaitError) Error() string {
	subject := "cloudtasks: "
	if e.ID != "" {
		subject += e.ID + ": "
	}
	if !e.Started {
		return fmt.Sprintf("%s%s not started: the context ended first (%v); no call was made", subject, e.Op, e.Err)
	}
	return fmt.Sprintf("%sstopped waiting for %s (%v); the work goes on and records its outcome", subject, e.Op, e.Err)
}

// Is makes a WaitError match ErrNotStarted or ErrStoppedWaiting.
func (e *WaitError) Is(target error) bool {
	if e.Started {
		return target == ErrStoppedWaiting
	}
	return target == ErrNotStarted
}

// Unwrap returns the context's error.
func (e *WaitError) Unwrap() error { return e.Err }
