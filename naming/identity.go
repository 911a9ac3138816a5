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

// Identity says how to fill the attempt slot of one request.
type Identity struct {
	// Strategy picks the rule. The zero value means StrategyStrict.
	Strategy Strategy
	// Number is the attempt number for StrategyStrict.
	Number uint64
	// Key is the caller's idempotency key for StrategyCallerKey.
	Key string
}

// Attempt returns the attempt slot for a request on taskKey.
func (i Identity) Attempt(taskKey string) (string, error) {
	switch i.Strategy {
	case 0, StrategyStrict:
		return AttemptNumber(i.Number), nil
	case StrategyCallerKey:
		return AttemptFromKey(taskKey, i.Key)
	case StrategyUnique:
		return AttemptUnique(), nil
	default:
		return "", &Error{Component: "strategy", Value: i.Strategy.String(), Rule: "must be strict, caller-key or unique"}
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
