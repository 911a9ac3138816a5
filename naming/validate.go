package naming

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Limits on the components of an internal ID. With them the longest valid ID
// (a retry timer) is 291 bytes: well inside the 500-character limit Cloud
// Tasks puts on task IDs and comfortable in a request header, although only
// its hash is ever sent as a task ID.
const (
	// MaxComponentLength bounds run_id and task_key, in bytes.
	MaxComponentLength = 100
	// MaxAttemptLength bounds the attempt slot, in bytes.
	MaxAttemptLength = 64
	// MaxEpoch is the largest due or check epoch: 9999-12-31T23:59:59Z.
	MaxEpoch = 253402300799
	// MaxIDLength is the length of the longest valid internal ID, in bytes.
	MaxIDLength = len(retryPrefix) + 2*MaxComponentLength + 1 + MaxAttemptLength + 2 + len("253402300799")
)

// allowedChars is how error messages spell the component alphabet.
const allowedChars = "[A-Za-z0-9._-]"

// ErrInvalidID is matched (errors.Is) by every validation error of this
// package.
var ErrInvalidID = errors.New("invalid internal ID")

// ErrMissingKey is matched (errors.Is) when an ID is built from
// CallerKey(""). It also matches ErrInvalidID.
var ErrMissingKey = errors.New("missing idempotency key")

// Error describes why an internal ID, or one of its parts, is invalid. It
// matches ErrInvalidID with errors.Is.
type Error struct {
	// Input is the whole internal ID being parsed, when there was one.
	Input string
	// Component names the part that broke a rule: "run_id", "task_key",
	// "attempt", "due_epoch", "check_epoch", "prefix", "kind",
	// "internal ID", "identity" (the zero Identity) or "idempotency key"
	// (the key of CallerKey).
	Component string
	// Value is the offending value of the component.
	Value string
	// Rule says what the value does wrong and what is allowed.
	Rule string

	missingKey bool
}

// Error returns a one-line message naming the component, the value and the
// rule, and the whole ID when one was parsed.
func (e *Error) Error() string {
	detail := e.Rule
	if e.Component != wholeID {
		detail = fmt.Sprintf("%s %q %s", e.Component, e.Value, e.Rule)
	}
	if e.Input == "" {
		return "invalid internal ID: " + detail
	}
	input := e.Input
	if len(input) > MaxIDLength {
		input = input[:64] + "…"
	}
	return fmt.Sprintf("invalid internal ID %q: %s", input, detail)
}

// wholeID is the Component of an error about the ID as a whole.
const wholeID = "internal ID"

// Is makes errors.Is(err, ErrInvalidID) hold for every *Error, and
// errors.Is(err, ErrMissingKey) for a missing caller key.
func (e *Error) Is(target error) bool {
	return target == ErrInvalidID || (e.missingKey && target == ErrMissingKey)
}

// validate checks every rule an internal ID must follow, so that two
// different IDs can never print the same and every printed ID parses back to
// the same parts.
func (id ID) validate() error {
	if err := checkComponent("run_id", id.runID, MaxComponentLength); err != nil {
		return err
	}
	if err := checkComponent("task_key", id.taskKey, MaxComponentLength); err != nil {
		return err
	}
	switch id.kind {
	case KindDispatch:
		return checkAttempt(id.attempt)
	case KindRetry:
		if err := checkAttempt(id.attempt); err != nil {
			return err
		}
		return checkEpoch("due_epoch", id.epoch)
	default:
		return checkEpoch("check_epoch", id.epoch)
	}
}

// checkComponent enforces the alphabet and length shared by every text
// component. The alphabet has no ':' (the separator), no whitespace and no
// control characters, which is what makes the text form unambiguous.
func checkComponent(name, v string, maxLen int) error {
	if v == "" {
		return &Error{Component: name, Value: v, Rule: "is empty; it needs 1 to " + strconv.Itoa(maxLen) + " characters from " + allowedChars}
	}
	if len(v) > maxLen {
		return &Error{Component: name, Value: v, Rule: fmt.Sprintf("is %d bytes long; at most %d allowed", len(v), maxLen)}
	}
	for i := 0; i < len(v); i++ {
		if !allowedByte(v[i]) {
			return &Error{Component: name, Value: v, Rule: describeBadRune(v[i:]) + "; allowed: " + allowedChars}
		}
	}
	return nil
}

func allowedByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

// describeBadRune names the first character of s, which is not allowed, in
// the words a reader needs to find it.
func describeBadRune(s string) string {
	r, _ := utf8.DecodeRuneInString(s)
	switch {
	case r == ':':
		return "contains ':' (the separator)"
	case r == utf8.RuneError:
		return "contains a byte that is not UTF-8"
	case unicode.IsSpace(r):
		return fmt.Sprintf("contains whitespace (%q)", r)
	case unicode.IsControl(r):
		return fmt.Sprintf("contains a control character (%q)", r)
	default:
		return fmt.Sprintf("contains %q", r)
	}
}

// checkAttempt allows any component-alphabet token, but an all-digit token
// is an attempt number and must be written the one canonical way, so that
// "01" and "1" cannot name the same attempt twice.
func checkAttempt(v string) error {
	if err := checkComponent("attempt", v, MaxAttemptLength); err != nil {
		return err
	}
	if !allDigits(v) {
		return nil
	}
	if len(v) > 1 && v[0] == '0' {
		return &Error{Component: "attempt", Value: v, Rule: "has a leading zero; attempt numbers are written in canonical decimal (\"1\", not \"01\")"}
	}
	if _, err := strconv.ParseUint(v, 10, 64); err != nil {
		return &Error{Component: "attempt", Value: v, Rule: "is out of range; attempt numbers fit in 64 bits"}
	}
	return nil
}

func checkEpoch(name string, epoch int64) error {
	if epoch < 0 || epoch > MaxEpoch {
		return &Error{Component: name, Value: strconv.FormatInt(epoch, 10),
			Rule: fmt.Sprintf("is out of range; allowed: 0 to %d seconds since the Unix epoch", int64(MaxEpoch))}
	}
	return nil
}

// parseEpoch reads a canonical decimal epoch: digits only, no sign, no
// leading zero.
func parseEpoch(name, v string) (int64, error) {
	if v == "" || !allDigits(v) {
		return 0, &Error{Component: name, Value: v, Rule: "must be whole seconds since the Unix epoch, in decimal digits"}
	}
	if len(v) > 1 && v[0] == '0' {
		return 0, &Error{Component: name, Value: v, Rule: "has a leading zero; epochs are written in canonical decimal"}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > MaxEpoch {
		return 0, &Error{Component: name, Value: v,
			Rule: fmt.Sprintf("is out of range; allowed: 0 to %d seconds since the Unix epoch", int64(MaxEpoch))}
	}
	return n, nil
}

func allDigits(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}
