// Package naming turns the readable IDs of orchestration work into the task
// IDs Cloud Tasks deduplicates on.
//
// # Two IDs for everything
//
// Every dispatch and timer has an internal ID, which people read, and a
// Cloud Tasks ID, which the service stores as the task's name:
//
//	dispatch:{run_id}:{task_key}:{attempt}                  -> d_…
//	timer:retry:{run_id}:{task_key}:{attempt}:{due_epoch}   -> t_…
//	timer:heartbeat:{run_id}:{task_key}:{check_epoch}       -> t_…
//
// The Cloud Tasks ID is the prefix followed by the first 26 characters of the
// lowercase, unpadded base32 encoding of SHA-256 of the internal ID. Hashing
// spreads names evenly (the service is slower for sequential names) and
// keeps every task ID at 28 characters whatever the components hold.
//
// # Idempotency
//
// The mapping is deterministic, so a repeated request for the same logical
// attempt names the same task, and Cloud Tasks answers the second create
// with ALREADY_EXISTS instead of making a second task. That only holds if
// two different attempts can never print the same internal ID, which is what
// the validation rules guarantee: components come from [A-Za-z0-9._-], so
// they cannot contain the ':' separator, whitespace or control characters;
// none is empty; lengths are bounded (every ID fits in MaxIDLength bytes, far
// below the service's 500-character limit); numbers and epochs have one
// canonical decimal form, so "01" and "1" are not two spellings of one
// attempt. Parse accepts exactly the strings String produces.
//
// # Identities
//
// The attempt slot says which requests count as the same. An Identity says
// how to fill it, and only three functions make one: Attempt(n) (the same
// attempt number is the same task), CallerKey(key) (a caller-provided key,
// hashed with the task key, so one key used for two kinds of task gives two
// tasks) and Unique() (a fresh UUIDv7, so every request is new). The zero
// Identity names no attempt and is refused: a forgotten attempt never
// becomes attempt 0. NewDispatch takes the identity of the attempt itself;
// NewRetryTimer the identity of the attempt the timer starts when it fires,
// the one after the attempt that failed. PayloadFingerprint hashes a
// request body, in RFC 8785 canonical form when it is JSON, so the same ID
// sent with a different body can be reported as a conflict.
//
// # Errors
//
// Every validation error matches ErrInvalidID with errors.Is and is an
// *Error naming the component, the offending value and the rule broken. A
// missing caller key also matches ErrMissingKey.
//
// # Performance
//
// An ID keeps its text and its Cloud Tasks ID, both made when the ID is
// made (one SHA-256 and one 28-byte allocation for the latter; see
// BenchmarkCloudTaskID against BenchmarkSHA256Baseline), so String and
// CloudTaskID cost a field read however often a dispatch asks
// (BenchmarkCachedCloudTaskID).
package naming
