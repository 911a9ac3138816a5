// Package cloudtasks is the dispatcher: it hands work to Google Cloud Tasks
// exactly once per logical attempt, through the official client, and
// records every dispatch and timer in the outbox it is given. It is the one
// package orchestration code needs: Dispatch, ScheduleTimer,
// Cancel/CancelTimer, Recover, Latest, History and Close (and DispatchTx,
// ScheduleTimerTx, CancelTx, WaitOutcome and Relay with a PostgreSQL
// outbox), with package
// naming for the identity of an attempt and an outbox of the caller's
// choice (outbox.NewMemory, or parquetbox.Open for Parquet files).
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
//     UUID, and at the same time
//  3. calls CreateTask with the deterministic name
//     projects/P/locations/L/queues/Q/tasks/d_…; AlreadyExists is a success;
//     transient codes (Unavailable, DeadlineExceeded, ResourceExhausted,
//     Aborted, Internal) are retried with capped exponential backoff and
//     jitter within Config.Retry — safe, because the name deduplicates;
//  4. returns both IDs, the task name and the outcome (created,
//     already_existed or recovered) once the call and the pending record's
//     group commit are both done, and records the outcome.
//
// With an outbox that decides a conditional append before it returns (an
// outbox.Reserver: pgbox), steps 1 and 2 are one round trip: the pending
// record of a new ID is tried first and kept, or refused with the ID's
// latest state, which step 1 then answers from; the pending record is kept
// before CreateTask is called.
//
// An outbox that can tell whether it is able to keep records at all (an
// outbox.Checker: pgbox checks that its tables exist) is asked once, by
// NewDispatcher, which refuses an outbox that is not ready with what is
// missing and how to make it ("ctdispatch migrate"). Config.SkipOutboxCheck
// (off by default) starts the dispatcher anyway, for a service that may
// start before its migration job: its calls fail until the tables exist.
//
// Identical calls made at the same time in one process share one CreateTask
// call, and exactly one of them sees "created". Across processes, the task
// name does the same job. Dispatch, ScheduleTimer, Cancel and Recover share
// one table of work in flight per ID, so they never race on a record; each
// caller waits on its own context (*WaitError when it ends first) while the
// shared work goes on, bounded by Config.Retry. Only calls that overlap the
// work share its answer: one made after the answer, while the record is
// still being written, waits for the record and reads the outbox afresh.
//
// # Durability
//
// Config.Durability says which record an answered call promises:
//
//	mode        the call returns once                        after a crash, an answered call's record is
//	overlapped  CreateTask and the pending record are kept   at least pending (Recover resolves it)
//	strict      the outcome is kept                          the outcome it answered
//
// overlapped is the default. How durable a kept record is, is the outbox's
// setting: parquetbox syncs its log on every group commit (or every
// interval with parquetbox.Interval); outbox.Memory keeps nothing past the
// process. Until the outbox has kept a record, and after any append
// failed, the pending record is waited for before CreateTask, so an outbox
// that cannot record stops calls with ErrOutboxUnavailable instead of
// creating tasks it cannot record. See ADR 0006 for the crash cases.
//
// # Identity
//
// The attempt slot of a dispatch ID must be said: naming.Attempt(n),
// naming.CallerKey(key) or naming.Unique(), the only ways to make a
// naming.Identity. The zero one is refused with a *RequestError, so a
// forgotten attempt never becomes attempt 0. A retry timer's
// TimerRequest.Next is the attempt it starts, the one after the failed
// attempt; its At names it, so derive At from a kept failure time
// (timers.Backoff.Due) and a repeat after a restart is the same timer.
//
// # Queues
//
// An ID's task lives in the queue of its first record. A repeat with an
// empty Task.Queue goes there, even after Config.Queue changed and when a
// pending record's create is sent again; a Task.Queue naming another queue
// is a *RequestError naming both.
//
// # Cancelling
//
// Cancel and CancelTimer delete the task from the queue the outbox
// recorded for the ID (a queue argument that differs is refused; an ID
// the outbox does not know needs one) and say what happened: deleted,
// already_gone or unknown. Cloud Tasks then holds the deleted task's name
// for up to Config.NameHold; the same ID dispatched or scheduled again
// meanwhile gets a *NameHeldError saying until about when, not an
// already_existed for a task that does not exist.
//
// # Testing
//
// The in-repo emulator (package cloudtasks/emulator) runs in the test's
// process; give it and the dispatcher the same fake clock. A clock with an
// Advance method (such as *clockwork.FakeClock) is advanced by the
// dispatcher's retry waits instead of being waited on, so a test with
// injected faults finishes without moving the clock itself.
//
// # Batching
//
// With Config.Batch, concurrent calls to one queue share BatchCreateTasks
// requests the way appends share a group commit: a call to an idle queue
// goes at once (as CreateTask), calls that arrive meanwhile form the next
// request, up to 100. The callers a shared request answered are expected
// back: until all of them are (at most for that request's round trip),
// their next calls gather into one request instead of the first going
// alone and the rest waiting a round trip behind it. A queue has at most
// Config.BatchInFlight requests (default 4) in flight. A lone caller pays
// nothing: no one waits for it. Each call gets its own outcome from its
// index. If the service answers UNIMPLEMENTED or the operation is not
// done at once, calls fall back to CreateTask, and the log says so once.
//
// # Lifecycle
//
// Close(ctx) stops new calls (ErrClosed), waits within ctx for the calls in
// flight to record their outcomes and for the outbox's last flush, and says
// what it could not finish.
//
// The worker receives an Idempotency-Key header with the internal ID and an
// X-Ctdispatch-Task-Id header with the Cloud Tasks ID, so it can deduplicate
// deliveries too.
//
// # Reuse
//
// A failed ID (a permanent error such as PermissionDenied or NotFound), a
// not_found one (see Recovery) and a cancelled one may be dispatched again,
// with any payload. A pending, created or
// already-existed ID never creates a second task.
//
// # Recovery
//
// A record still pending after Config.StaleAfter is the trace of a process
// that stopped mid-dispatch, or of a call whose outcome stayed unknown.
// Recover asks Cloud Tasks (GetTask) whether the named task exists:
//
//	Recover saw   status written  what the caller should do
//	OK            already_existed nothing; a repeat is answered from the outbox
//	NOT_FOUND     not_found       dispatch again if the work is needed: the task was
//	                              never created, or it ran and is gone; a repeat within
//	                              the name-reuse window is answered already_existed
//	other codes   (pending)       nothing; the next pass tries again
//
// Recover writes already_existed, never created, for a task it finds: the
// task may have been created by a caller in another process that recorded
// created itself, and an ID has at most one created record. not_found is
// not a failure: the service cannot tell "never created" from
// "ran and deleted". Only ALREADY_EXISTS to a create call says the name
// existed recently, and a repeated Dispatch records that as already_existed. Any instance may recover any
// processor's records unless Config.EnforceOwnership is set; the processor
// UUID on each record is an audit trail of who did what, and every hand-over
// is logged and counted. A caller that repeats an interrupted Dispatch
// finishes it the same way and gets outcome recovered.
//
// # Transactional dispatch
//
// With a PostgreSQL outbox (package outbox/pgbox), DispatchTx and
// ScheduleTimerTx record a dispatch inside the caller's own transaction
// (pgbox.SQLTx for a *sql.Tx, pgxtx.Tx for a pgx.Tx): the ID's checks run
// there, and the pending record and an intent holding the whole
// CreateTask request commit with the caller's change or not at all. A
// relay creates the task after commit: NewDispatcher starts one for
// Config.RelayQueues (by default Config.Queue) unless Config.NoRelay, and
// relays of every dispatcher on the database share the intents through
// claims (Config.RelayClaim), Config.RelayConcurrency calls at a time.
// With Config.Listener (package outbox/pgbox/pgxlisten) the commit's
// notification wakes the relay, and Config.RelayInterval is the poll that
// finds what a lost notification did not announce; without one the relay
// polls every RelayInterval. Close drains it: it claims no more, releases
// what it did not start and lets its calls finish within
// Config.RelayDrainTimeout. CancelTx records a cancel the same way,
// carried out by a relay. WaitOutcome waits for the relay's outcome;
// Relay runs one pass. An outbox.Memory records intents too, in
// transactions of its own (Memory.Begin), so code and tests that use these
// calls run without a database. See docs/transactional.md.
//
// # Errors
//
// Every error matches a sentinel with errors.Is and a type with errors.As:
// ErrInvalidConfig (*ConfigError), ErrInvalidRequest (*RequestError, naming
// the field, the value and the rule; ErrTooFar for a timer past 30 days),
// ErrPayloadConflict (*ConflictError), ErrNotOwner (*OwnershipError),
// ErrNameHeld (*NameHeldError), ErrCreateFailed, ErrGaveUp and
// ErrCancelFailed (*CallError, which unwraps to the gRPC status:
// status.Code(err) works), ErrNotStarted and ErrStoppedWaiting (*WaitError:
// the caller's context ended before anything started, or while the work
// goes on), ErrOutboxUnavailable (*OutboxError, whose Op says whether the
// outbox could not be read or could not record the pending state, the
// outcome or a cancel), ErrIndeterminate (*IndeterminateError: two
// processes wrote the ID's newest state blind of each other and GetTask did
// not settle it, or, on an outbox that cannot read every process's
// records, GetTask could not confirm a recorded task, or the outbox lost
// its answer to the pending record before the call, which was not made;
// Unknown names what is unknown; see docs/consistency.md)
// and ErrClosed. An outbox that lost its answer to a record (a database
// connection lost while the record committed; outbox.ErrKeptUnknown) may
// have kept it: the pending record's case is an *IndeterminateError
// (UnknownPendingRecord) around the *OutboxError, so it matches both
// ErrIndeterminate and ErrOutboxUnavailable; repeat the call.
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
// A relay counts each outcome it records in ctdispatch.dispatch.outcomes
// and .duration (outcome created, already_existed or failed; the duration
// runs from the intent's recording, so it includes the wait for commit
// and for a relay), and its CreateTask calls in ctdispatch.cloudtasks.calls.
//
// Logs go to Config.Logger. Every line about a dispatch carries its internal
// ID under the key "id", and the trace_id and span_id of the call's span
// when it has one; bodies, header values and credentials are never logged.
//
// # Tracing
//
// Spans go to Config.TracerProvider, the global provider by default, read
// at each call (while a program has set none, no span is made and tracing
// costs nothing). Dispatch and ScheduleTimer make a producer span,
// "dispatch <queue>" or "schedule_timer <queue>". A call to Cloud Tasks
// answered at the first attempt is an event on its operation's span (the
// method and the gRPC code); when the first attempt fails with a code
// worth retrying, each attempt is a client span under it instead (attempt
// number, backoff, gRPC code; a failed attempt is an error). Cancel,
// Recover (one span per pass, one per record linked to the span its intent
// was recorded under) and a shared BatchCreateTasks request (linked to
// every call it carries) have spans too; a call that joined another's
// flight links to the leader's span.
// The official client's own gRPC spans are turned off on clients the
// dispatcher opens, so each call shows once.
//
// The producer span's context goes into the task's HTTP headers
// (traceparent, tracestate) through Config.Propagator, the global one by
// default; the worker's consumer span is its child and links to it, so a
// dispatch and its deliveries are one trace. OpenTelemetry's global
// propagator is a no-op until a program sets one: the first call that has
// a span to send and whose propagator writes nothing logs a warning, once
// per dispatcher. A header the caller set is left alone. The headers count against MaxHeaderBytes and
// MaxTaskSize, and stay outside the payload fingerprint: the same ID
// dispatched under another trace is a repeat, not a conflict. Each record
// keeps the producer span's trace and span IDs (outbox.Record.TraceID,
// SpanID; the trace_id and span_id columns). ADR 0014 lists the span names
// and attributes.
package cloudtasks
