package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/gowebpki/jcs"
)

// Strategy is a way to fill the attempt slot of an ID, and so decides when
// two requests are the same logical attempt.
type Strategy uint8

// The identity strategies.
const (
	// StrategyStrict uses the attempt number: the same run, task and number
	// always name the same task.
	StrategyStrict Strategy = iota + 1
	// StrategyCallerKey uses a key the caller provides (for example an
	// upstream event ID), hashed together with the task key.
	StrategyCallerKey
	// StrategyUnique uses a fresh UUIDv7, so every request is a new attempt
	// and nothing is deduplicated.
	StrategyUnique
)

// String returns "strict", "caller-key" or "unique".
func (s Strategy) String() string {
	switch s {
	case StrategyStrict:
		return "strict"
	case StrategyCallerKey:
		return "caller-key"
	case StrategyUnique:
		return "unique"
	default:
		return "Strategy(" + strconv.Itoa(int(s)) + ")"
	}
}

// Identity says how to fill the attempt slot of one request. Build one with
// Attempt, CallerKey or Unique. The zero Identity is refused: a request
// must say which attempt it is, so a forgotten attempt never becomes
// attempt 0. A field of another strategy set beside Strategy is refused
// too, so a key is never silently ignored.
type Identity struct {
	// Strategy picks the rule. Required.
	Strategy Strategy
	// Number is the attempt number for StrategyStrict.
	Number uint64
	// Key is the caller's idempotency key for StrategyCallerKey.
	Key string
}

// Attempt returns the identity of attempt number n (StrategyStrict): the
// same run, task and number always name the same task. Numbering is the
// caller's; 0 is a number like any other.
func Attempt(n uint64) Identity { return Identity{Strategy: StrategyStrict, Number: n} }

// CallerKey returns the identity of the attempt named by the caller's
// idempotency key (StrategyCallerKey), for example an upstream event ID.
func CallerKey(key string) Identity { return Identity{Strategy: StrategyCallerKey, Key: key} }

// Unique returns an identity that makes every request a new attempt
// (StrategyUnique).
func Unique() Identity { return Identity{Strategy: StrategyUnique} }

// identityHint says how to write each identity, for error messages.
const identityHint = "; use naming.Attempt(n), naming.CallerKey(key) or naming.Unique()"

// Attempt returns the attempt slot for a request on taskKey. Errors match
// ErrInvalidID and name the field: a zero Strategy, a field that the
// strategy does not use, a missing key (ErrMissingKey).
func (i Identity) Attempt(taskKey string) (string, error) {
	bad := func(component, value, rule string) (string, error) {
		return "", &Error{Component: component, Value: value, Rule: rule}
	}
	switch i.Strategy {
	case 0:
		switch {
		case i.Key != "":
			return bad("strategy", "", "is not set although Key is: set Strategy to StrategyCallerKey"+identityHint)
		case i.Number != 0:
			return bad("strategy", "", "is not set although Number is: set Strategy to StrategyStrict"+identityHint)
		}
		return bad("strategy", "", "is not set: the request must say which attempt it is"+identityHint)
	case StrategyStrict:
		if i.Key != "" {
			return bad("idempotency key", i.Key, "is set with the strict strategy, which uses Number only"+identityHint)
		}
		return AttemptNumber(i.Number), nil
	case StrategyCallerKey:
		if i.Number != 0 {
			return bad("number", AttemptNumber(i.Number), "is set with the caller-key strategy, which uses Key only"+identityHint)
		}
		return AttemptFromKey(taskKey, i.Key)
	case StrategyUnique:
		if i.Number != 0 {
			return bad("number", AttemptNumber(i.Number), "is set with the unique strategy, which uses neither Number nor Key"+identityHint)
		}
		if i.Key != "" {
			return bad("idempotency key", i.Key, "is set with the unique strategy, which uses neither Number nor Key"+identityHint)
		}
		return AttemptUnique(), nil
	default:
		return bad("strategy", i.Strategy.String(), "must be strict, caller-key or unique"+identityHint)
	}
}

// AttemptNumber returns the canonical attempt slot for attempt number n.
func AttemptNumber(n uint64) string { return strconv.FormatUint(n, 10) }

// MaxKeyLength bounds a caller-provided idempotency key, in bytes.
const MaxKeyLength = 1024

// AttemptFromKey returns the attempt slot for a caller-provided idempotency
// key: "k-" and 26 base32 characters of SHA-256 over the task key and the
// caller key. The task key is part of the hash, so one caller key used for
// two kinds of task gives two different attempts. Any non-empty UTF-8 key up
// to MaxKeyLength bytes is accepted; a missing key is an error matching
// ErrMissingKey.
func AttemptFromKey(taskKey, callerKey string) (string, error) {
	if callerKey == "" {
		return "", &Error{Component: "idempotency key", Value: callerKey,
			Rule: "is missing; the caller-key strategy needs a non-empty key", missingKey: true}
	}
	if len(callerKey) > MaxKeyLength {
		return "", &Error{Component: "idempotency key", Value: callerKey[:32] + "…",
			Rule: fmt.Sprintf("is %d bytes long; at most %d allowed", len(callerKey), MaxKeyLength)}
	}
	if !utf8.ValidString(callerKey) {
		return "", &Error{Component: "idempotency key", Value: callerKey, Rule: "is not valid UTF-8"}
	}
	if err := checkComponent("task_key", taskKey, MaxComponentLength); err != nil {
		return "", err
	}
	// The length prefix keeps ("ab","c") and ("a","bc") apart.
	return hashText("k-", fmt.Sprintf("%d:%s:%s", len(taskKey), taskKey, callerKey)), nil
}

// AttemptUnique returns a fresh attempt slot that no other call returns:
// "u-" and a UUIDv7, whose time-ordered bits keep outbox files well sorted.
func AttemptUnique() string {
	return "u-" + uuid.Must(uuid.NewV7()).String()
}

// PayloadFingerprint returns the lowercase hex SHA-256 of a request body, so
// that the same ID sent with a different body can be told apart. A body that
// is valid JSON is first put in RFC 8785 canonical form, so key order and
// whitespace do not change the fingerprint; any other body is hashed as it
// is. An empty body hashes as empty bytes.
func PayloadFingerprint(body []byte) string {
	if canonical, err := jcs.Transform(body); err == nil {
		body = canonical
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// ParseStrategy is the inverse of Strategy.String.
func ParseStrategy(s string) (Strategy, error) {
	for _, st := range []Strategy{StrategyStrict, StrategyCallerKey, StrategyUnique} {
		if s == st.String() {
			return st, nil
		}
	}
	return 0, &Error{Component: "strategy", Value: s, Rule: "must be strict, caller-key or unique"}
}
