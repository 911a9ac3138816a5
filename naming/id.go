package naming

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kind says what an internal ID names: a task attempt or one of the two
// kinds of timer.
type Kind uint8

// The kinds of internal ID. The zero Kind is invalid, so an ID left empty by
// mistake never passes validation.
const (
	// KindDispatch names one attempt of a task: dispatch:{run}:{task}:{attempt}.
	KindDispatch Kind = iota + 1
	// KindRetry names the timer that starts the next attempt of a task at a
	// due time: timer:retry:{run}:{task}:{attempt}:{due_epoch}, where
	// {attempt} is the attempt the timer starts, not the one that failed.
	KindRetry
	// KindHeartbeat names a liveness check of a running task at a check
	// time: timer:heartbeat:{run}:{task}:{check_epoch}.
	KindHeartbeat
)

// String returns "dispatch", "retry" or "heartbeat", the value stored in the
// outbox's kind column.
func (k Kind) String() string {
	switch k {
	case KindDispatch:
		return "dispatch"
	case KindRetry:
		return "retry"
	case KindHeartbeat:
		return "heartbeat"
	default:
		return "Kind(" + strconv.Itoa(int(k)) + ")"
	}
}

// ParseKind is the inverse of Kind.String.
func ParseKind(s string) (Kind, error) {
	switch s {
	case "dispatch":
		return KindDispatch, nil
	case "retry":
		return KindRetry, nil
	case "heartbeat":
		return KindHeartbeat, nil
	}
	return 0, &Error{Component: "kind", Value: s, Rule: "must be dispatch, retry or heartbeat"}
}

// IsTimer reports whether the kind is a timer (retry or heartbeat).
func (k Kind) IsTimer() bool { return k == KindRetry || k == KindHeartbeat }

// prefix is the Cloud Tasks ID prefix of the kind: "d_" or "t_".
func (k Kind) prefix() string {
	if k.IsTimer() {
		return "t_"
	}
	return "d_"
}

// ID is a validated internal ID. It is an immutable value: build one with
// NewDispatch, NewRetryTimer, NewHeartbeat or Parse, read it with its
// accessors. It keeps its text form and its Cloud Tasks ID, both computed
// once when it is made, so String and CloudTaskID cost nothing. The zero ID is not valid; IsZero reports it.
type ID struct {
	kind    Kind
	runID   string
	taskKey string
	attempt string
	epoch   int64
	text    string
	cloudID string // the Cloud Tasks ID, hashed once when the ID is made
}

// Prefixes of the three ID forms, separators included.
const (
	dispatchPrefix  = "dispatch:"
	retryPrefix     = "timer:retry:"
	heartbeatPrefix = "timer:heartbeat:"
)

// NewDispatch builds the ID of the attempt of a task that identity names:
// naming.Attempt(n), naming.CallerKey(key) or naming.Unique(). The zero
// Identity is refused.
func NewDispatch(runID, taskKey string, identity Identity) (ID, error) {
	attempt, err := identity.slot(taskKey)
	if err != nil {
		return ID{}, err
	}
	return build(ID{kind: KindDispatch, runID: runID, taskKey: taskKey, attempt: attempt})
}

// NewRetryTimer builds the ID of the retry timer that, at due, starts the
// attempt next names: the attempt that follows the failed one, for example
// naming.Attempt(3) after attempt 2 failed, and the identity the dispatch
// made when the timer fires uses. The zero Identity is refused. Sub-second
// precision is dropped: timers are named to the second, so a timer stays
// one timer only if every call passes the same due time (see
// timers.Backoff).
func NewRetryTimer(runID, taskKey string, next Identity, due time.Time) (ID, error) {
	attempt, err := next.slot(taskKey)
	if err != nil {
		return ID{}, err
	}
	return build(ID{kind: KindRetry, runID: runID, taskKey: taskKey, attempt: attempt, epoch: due.Unix()})
}

// NewHeartbeat builds the ID of a heartbeat check of a task at check.
// Sub-second precision is dropped: timers are named to the second.
func NewHeartbeat(runID, taskKey string, check time.Time) (ID, error) {
	return build(ID{kind: KindHeartbeat, runID: runID, taskKey: taskKey, epoch: check.Unix()})
}

// build validates the parts of id and fixes its text.
func build(id ID) (ID, error) {
	if err := id.validate(); err != nil {
		return ID{}, err
	}
	var buf [MaxIDLength]byte
	id.text = string(id.appendText(buf[:0]))
	id.cloudID = hashText(id.kind.prefix(), id.text)
	return id, nil
}

// Kind says which of the three forms the ID has.
func (id ID) Kind() Kind { return id.kind }

// RunID returns the orchestration run the task belongs to.
func (id ID) RunID() string { return id.runID }

// TaskKey returns the name of the task within its run.
func (id ID) TaskKey() string { return id.taskKey }

// Attempt returns the attempt slot of a dispatch ID (the attempt it is) or
// of a retry ID (the attempt the timer starts), and "" for a heartbeat.
func (id ID) Attempt() string { return id.attempt }

// Epoch returns the due time of a retry timer or the check time of a
// heartbeat in whole seconds since the Unix epoch, and 0 for a dispatch.
func (id ID) Epoch() int64 { return id.epoch }

// IsZero reports whether id is the zero ID, which names nothing.
func (id ID) IsZero() bool { return id.kind == 0 }

// IsTimer reports whether the ID names a timer rather than a dispatch.
func (id ID) IsTimer() bool { return id.kind.IsTimer() }

// Time returns the due or check time of a timer ID, and the zero time for a
// dispatch.
func (id ID) Time() time.Time {
	if !id.IsTimer() {
		return time.Time{}
	}
	return time.Unix(id.epoch, 0).UTC()
}

// String returns the internal ID in its one canonical text form, and "" for
// the zero ID.
func (id ID) String() string { return id.text }

// appendText appends the text form built from the parts to dst. Callers pass
// a stack buffer of MaxIDLength bytes, which holds every valid ID.
func (id ID) appendText(dst []byte) []byte {
	switch id.kind {
	case KindDispatch:
		dst = append(dst, dispatchPrefix...)
	case KindRetry:
		dst = append(dst, retryPrefix...)
	case KindHeartbeat:
		dst = append(dst, heartbeatPrefix...)
	}
	dst = append(dst, id.runID...)
	dst = append(dst, ':')
	dst = append(dst, id.taskKey...)
	if id.kind != KindHeartbeat {
		dst = append(dst, ':')
		dst = append(dst, id.attempt...)
	}
	if id.IsTimer() {
		dst = append(dst, ':')
		dst = strconv.AppendInt(dst, id.epoch, 10)
	}
	return dst
}

// Parse reads an internal ID in any of its three forms. It accepts exactly
// the strings String produces, so Parse(s).String() == s for every s it
// accepts. Errors match ErrInvalidID and name the component and the rule.
func Parse(s string) (ID, error) {
	if len(s) > MaxIDLength {
		return ID{}, &Error{Input: s, Component: wholeID, Value: s,
			Rule: fmt.Sprintf("it is %d bytes long; at most %d allowed", len(s), MaxIDLength)}
	}
	var id ID
	var rest string
	var want int
	switch {
	case strings.HasPrefix(s, dispatchPrefix):
		id.kind, rest, want = KindDispatch, s[len(dispatchPrefix):], 3
	case strings.HasPrefix(s, retryPrefix):
		id.kind, rest, want = KindRetry, s[len(retryPrefix):], 4
	case strings.HasPrefix(s, heartbeatPrefix):
		id.kind, rest, want = KindHeartbeat, s[len(heartbeatPrefix):], 3
	default:
		return ID{}, &Error{Input: s, Component: "prefix", Value: prefixOf(s),
			Rule: `must be "dispatch:", "timer:retry:" or "timer:heartbeat:"`}
	}
	parts := strings.Split(rest, ":")
	if len(parts) != want {
		return ID{}, &Error{Input: s, Component: wholeID, Value: s,
			Rule: fmt.Sprintf("a %s ID has %d components after its prefix, separated by ':'; found %d",
				id.kind, want, len(parts))}
	}
	id.runID, id.taskKey = parts[0], parts[1]
	switch id.kind {
	case KindDispatch:
		id.attempt = parts[2]
	case KindRetry:
		id.attempt = parts[2]
		epoch, err := parseEpoch("due_epoch", parts[3])
		if err != nil {
			return ID{}, withInput(err, s)
		}
		id.epoch = epoch
	case KindHeartbeat:
		epoch, err := parseEpoch("check_epoch", parts[2])
		if err != nil {
			return ID{}, withInput(err, s)
		}
		id.epoch = epoch
	}
	if err := id.validate(); err != nil {
		return ID{}, withInput(err, s)
	}
	// The canonical-form rules make s the one text of these parts, so it is
	// kept as it is.
	id.text = s
	id.cloudID = hashText(id.kind.prefix(), id.text)
	return id, nil
}

// prefixOf returns what stands before the first ':' of s, for error messages.
func prefixOf(s string) string {
	if i := strings.IndexByte(s, ':'); i >= 0 {
		return s[:i+1]
	}
	return s
}

func withInput(err error, input string) error {
	var e *Error
	if errors.As(err, &e) && e.Input == "" {
		e.Input = input
	}
	return err
}
