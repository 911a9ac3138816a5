// Package cloudtasks is the dispatcher: it hands work to Google Cloud Tasks
// exactly once per logical attempt, through the official client, and
// records every dispatch in the outbox.
//
// # The flow of one dispatch
//
// Dispatch derives the internal ID (dispatch:{run}:{task}:{attempt}) and
// the Cloud Tasks ID (d_…) with package naming, checks the request against
// the service's limits before any I/O, and then:
//
//  1. asks the outbox for the ID's latest state: created or already
//     existed answers at once, with no call (an idempotent skip); the same
//     ID with another payload fingerprint is a *ConflictError;
//  2. records "pending" with the payload fingerprint and this processor's
//     UUID;
//  3. calls CreateTask with the deterministic name
//     projects/P/locations/L/queues/Q/tasks/d_…; AlreadyExists is a success;
//     transient codes (Unavailable, DeadlineExceeded, ResourceExhausted,
//     Aborted, Internal) are retried with capped exponential backoff and
//     jitter while the caller's context lasts — safe, because the name
//     deduplicates;
//  4. records the outcome durably and returns both IDs, the task name and
//     the outcome: created, already_existed or recovered.
//
// Identical calls made at the same time in one process share one CreateTask
// call, and exactly one of them sees "created". Across processes, the task
// name does the same job.
//
// The worker receives an Idempotency-Key header with the internal ID and an
// X-Ctdispatch-Task-Id header with the Cloud Tasks ID, so it can deduplicate
// deliveries too.
//
// # Reuse
//
// A failed ID (a permanent error such as PermissionDenied or NotFound) may
// be dispatched again, with any payload. A pending, created or
// already-existed ID never creates a second task.
//
// # Recovery
//
// A record still pending after Config.StaleAfter is the trace of a process
// that stopped mid-dispatch. Recover asks Cloud Tasks whether the named
// task exists and records created (it does) or failed with NOT_FOUND (it
// does not; the caller may dispatch again). Any instance may recover any
// processor's records unless Config.EnforceOwnership is set; the processor
// UUID on each record is an audit trail of who did what, and every hand-over
// is logged and counted. A caller that repeats an interrupted Dispatch
// finishes it the same way and gets outcome recovered.
//
// # Errors
//
// Every error matches a sentinel with errors.Is and a type with errors.As:
// ErrInvalidConfig (*ConfigError), ErrInvalidRequest (*RequestError, naming
// the field, the value and the rule), ErrPayloadConflict (*ConflictError),
// ErrNotOwner (*OwnershipError), ErrCreateFailed and ErrGaveUp
// (*CallError, which unwraps to the gRPC status: status.Code(err) works).
//
// # Observability
//
// Metrics go to Config.MeterProvider (OpenTelemetry; no-op by default):
//
//	ctdispatch.dispatch.outcomes          counter    kind, outcome
//	ctdispatch.dispatch.idempotent_skips  counter    kind
//	ctdispatch.dispatch.payload_conflicts counter
//	ctdispatch.cloudtasks.calls           counter    method, code
//	ctdispatch.dispatch.duration          histogram  kind, outcome (seconds)
//	ctdispatch.recover.records            counter    kind, result
//	ctdispatch.recover.handovers          counter    kind
//
// Logs go to Config.Logger. Every line about a dispatch carries its internal
// ID under the key "id"; bodies, header values and credentials are never
// logged.
package cloudtasks
