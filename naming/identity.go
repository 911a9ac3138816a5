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

// strategy is the rule an Identity fills the attempt slot by.
type strategy uint8

const (
	// strict uses the attempt number: the same run, task and number always
	// name the same task.
	strict strategy = iota + 1
	// callerKey uses a key the caller provides (for example an upstream
	// event ID), hashed together with the task key.
	callerKey
	// unique uses a fresh UUIDv7, so every request is a new attempt and
	// nothing is deduplicated.
	unique
)

// Identity says which logical attempt a request is, and so fills the
// attempt slot of its ID. Only Attempt, CallerKey and Unique make one. The
// zero Identity says nothing and is refused wherever an identity is needed,
// so a forgotten attempt never becomes attempt 0.
type Identity struct {
	strategy strategy
	number   uint64
	key      string
}

// Attempt returns the identity of attempt number n: the same run, task and
// number always name the same task. Numbering is the caller's; 0 is a
// number like any other.
func Attempt(n uint64) Identity { return Identity{strategy: strict, number: n} }

// CallerKey returns the identity of the attempt named by the caller's
// idempotency key, for example an upstream event ID. The key is hashed
// together with the task key, so one key used for two kinds of task names
// two attempts. An empty key is refused where the identity is used
// (ErrMissingKey), as is one longer than MaxKeyLength bytes or not valid
// UTF-8.
func CallerKey(key string) Identity { return Identity{strategy: callerKey, key: key} }

// Unique returns an identity that makes every request a new attempt: each
// ID built from it gets a fresh UUIDv7, so nothing is deduplicated.
func Unique() Identity { return Identity{strategy: unique} }

// IsZero reports whether i is the zero Identity, which names no attempt.
func (i Identity) IsZero() bool { return i.strategy == 0 }

// String describes the identity as it was made: "attempt 2", "caller key
// \"evt-42\"" or "unique", and "" for the zero Identity.
func (i Identity) String() string {
	switch i.strategy {
	case strict:
		return "attempt " + strconv.FormatUint(i.number, 10)
	case callerKey:
		return "caller key " + strconv.Quote(i.key)
	case unique:
		return "unique"
	}
	return ""
}

// identityHint says how to write each identity, for error messages.
const identityHint = "; use naming.Attempt(n), naming.CallerKey(key) or naming.Unique()"

// slot returns the attempt slot the identity gives a request on taskKey.
// Errors match ErrInvalidID: the zero Identity (component "identity") and
// a bad caller key (ErrMissingKey when it is empty).
func (i Identity) slot(taskKey string) (string, error) {
	switch i.strategy {
	case strict:
		return strconv.FormatUint(i.number, 10), nil
	case callerKey:
		return keySlot(taskKey, i.key)
	case unique:
		return "u-" + uuid.Must(uuid.NewV7()).String(), nil
	}
	return "", &Error{Component: "identity", Value: "", Rule: "is not set: the request must say which attempt it is" + identityHint}
}

// MaxKeyLength bounds a caller-provided idempotency key, in bytes.
const MaxKeyLength = 1024

// keySlot returns the attempt slot of a caller-provided idempotency key:
// "k-" and 26 base32 characters of SHA-256 over the task key and the
// caller key.
func keySlot(taskKey, key string) (string, error) {
	if key == "" {
		return "", &Error{Component: "idempotency key", Value: key,
			Rule: "is missing; naming.CallerKey needs a non-empty key", missingKey: true}
	}
	if len(key) > MaxKeyLength {
		return "", &Error{Component: "idempotency key", Value: key[:32] + "…",
			Rule: fmt.Sprintf("is %d bytes long; at most %d allowed", len(key), MaxKeyLength)}
	}
	if !utf8.ValidString(key) {
		return "", &Error{Component: "idempotency key", Value: key, Rule: "is not valid UTF-8"}
	}
	if err := checkComponent("task_key", taskKey, MaxComponentLength); err != nil {
		return "", err
	}
	// The length prefix keeps ("ab","c") and ("a","bc") apart.
	return hashText("k-", fmt.Sprintf("%d:%s:%s", len(taskKey), taskKey, key)), nil
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
