// Package worker is the receiving end of ctdispatch: an http.Handler for
// Go services that Cloud Tasks delivers ctdispatch's tasks to. Cloud Tasks
// delivers each task at least once; the worker makes its effect happen
// once.
//
// For each request the worker verifies the caller's OIDC token, reads the
// Cloud Tasks headers into a Delivery, checks that the Idempotency-Key the
// dispatcher set names the task that carries it, runs the Handler through
// an Inbox that remembers which keys are finished, and answers with the
// status that tells Cloud Tasks whether to retry.
//
// The package depends on naming, the outbox seam (package outbox, not the
// Parquet engine), the standard library, Google's idtoken verifier and the
// OpenTelemetry metric API; the SQL inbox works through database/sql with
// any PostgreSQL driver (the tests use pgx's stdlib).
//
// # What is verified
//
// The worker first decodes the bearer token itself and refuses, without
// fetching any key, one that is not a JWT, that is signed with another
// algorithm than RS256 (the one Google signs Cloud Tasks' tokens with), or
// whose expiry has passed on the wall clock. The token then goes to
// google.golang.org/api/idtoken, which checks its RS256 signature against
// Google's published keys (cached as long as Google's Cache-Control
// allows). The worker then checks what idtoken leaves to its caller: the
// issuer (Config.Issuers, Google's by default), the audience
// (Config.Audiences), the signing service account's "email"
// (Config.ServiceAccounts) and "email_verified". A request without a valid
// token never reaches the handler and its body is not read. Verification is
// off only when Config.InsecureSkipVerify says so, and New logs a warning
// when it is.
//
// A refused token is answered with the outcome alone as the body
// ("unauthorized", "forbidden", "keys_unavailable") and its Refusal
// (RefusalIssuer, RefusalExpired, …) in the HeaderRefusal header: a code
// that says which check failed, never with what value. Whoever can reach
// the URL learns nothing it could use, such as whose token to obtain or
// for which audience. The full reason, naming the value and the rule, is
// logged with the request's trace (see Observability), for example
//
//	issuer "http://127.0.0.1:1234" not accepted; accepted: ["https://accounts.google.com" "accounts.google.com"] (Config.Issuers)
//
// and the Refusal is the "refusal" attribute of the request's metrics.
// An expired token's reason gives its exp and iat and the worker's clock,
// and blames the clocks when iat is far from it (an emulator whose fake
// clock is set in the past signs such tokens). Neither the answer nor the
// log quotes the token. Config.ExplainRefusals, for development only,
// adds the full reason to the body as a second line.
//
// # Against the emulator
//
// The emulator (package cloudtasks/emulator) signs its tokens with a key of
// its own and names itself as their issuer. A worker accepts them with
// Issuers: []string{emu.Issuer()} and KeysClient: emu.KeysClient() beside
// its Audiences and ServiceAccounts; ExampleNew_emulator shows it, and an
// emulator whose clock is fake should start it at the real now. With
// Config.ExplainRefusals the emulator's delivery log (the start of each
// answer) says why a token was refused.
//
// The worker then reads the headers. The Idempotency-Key must parse as an
// internal ID (naming.Parse) whose Cloud Tasks ID equals
// X-CloudTasks-TaskName, and X-Ctdispatch-Task-Id, when present. A request
// whose headers do not fit is a permanent failure (see below). A task with
// no Idempotency-Key is refused the same way, unless Config.AcceptUnkeyed
// lets it through without an inbox.
//
// # Status codes
//
// Cloud Tasks treats any 2xx as success and deletes the task; any other
// status, or no answer within the dispatch deadline, is a failure retried
// under the queue's retry_config; 429 and 503 also make the queue slow its
// dispatch rate and honour Retry-After. Hence:
//
//	200 done              the handler returned nil; key marked done
//	200 duplicate         the key was already finished; handler not called
//	200 failed            the handler returned Permanent(err); writes undone, key marked failed
//	200 rejected          verified, but headers missing, malformed or mismatched; handler not called
//	401 unauthorized      no token, or one forged, expired, malformed or not RS256 (with the Refusal)
//	403 forbidden         a valid token from another issuer, audience or service account (with the Refusal)
//	413 too_large         body over Config.MaxBodyBytes (only a worker configured below its queue sees one)
//	500 retry             the handler returned another error, or the inbox failed
//	500 panic             the handler panicked; writes undone
//	500 busy              another delivery held the key longer than Config.LockTimeout
//	500 keys_unavailable  Google's signing keys could not be fetched
//	503 slow_down         the handler returned SlowDown(err, d); Retry-After: d
//
// Permanent failures are answered 2xx because a 4xx would make Cloud Tasks
// retry for as long as the queue allows (100 attempts over hours by
// default) with no chance of success; they are logged at error level and
// counted instead. 401, 403 and 413 stay 4xx: each is a configuration
// mistake that an operator can mend, after which the retries succeed. 429
// and 503 are answered only when the handler asks, because they slow the
// whole queue.
//
// # The inbox
//
// An Inbox runs a key's work at most once to completion. SQLInbox does it
// in one PostgreSQL transaction per delivery: it inserts the key's row,
// runs the handler with that transaction (Delivery.Tx), and commits the
// handler's writes and the row together. A delivery of a finished key is
// answered 200 without calling the handler. A crash or a retryable error
// before the commit leaves nothing, so the redelivery does the work. While
// one delivery holds a key, another waits on the row at most
// Config.LockTimeout, then is answered 500 and retried later. Within one
// process deliveries of a key also wait for each other before they take a
// database connection.
//
// What the handler does outside Delivery.Tx (calling another service,
// sending a message) is not covered and may happen again on a redelivery:
// make it idempotent on Delivery.ID.
//
// Finished keys must be kept at least MinRetention (31 days, the longest
// Cloud Tasks keeps a task); SQLInbox.Cleanup removes older ones. Create the
// table with SQLInbox.Migrate or "ctdispatch worker migrate".
//
// MemoryInbox keeps keys in the process's memory: for tests, demos and
// single-process tools. Another process, or a restart, runs a key again.
//
// # Deliveries in the outbox
//
// With Config.Outbox set, every delivery that passed verification, the key
// check and the body cap is recorded in the outbox's deliveries table
// (outbox.TableDeliveries) under an ID of its own: the internal ID, '#'
// and a UUIDv7 (outbox.DeliveryID), because Cloud Tasks may deliver one
// attempt twice with the same counts. A started record (arrival time,
// retry and execution counts, queue, processor) is written and waited for
// before the inbox and the handler run, so a process killed inside the
// handler leaves a delivery that stays started; the outcome record (the
// outcome's name as status, the HTTP status, the latency from arrival to
// the outcome) is written and waited for before the answer is sent.
// Requests refused before that point (401, 403, 413, rejected headers) are
// not recorded: they are logged and counted, and a refused caller cannot
// write into the table.
//
// A record that cannot be written does not change the answer: the inbox
// has committed (or not) already, the effect is what it is, and a 500
// would only bring a redelivery that finds the key done and records a
// duplicate, while a long outage of the outbox would hold every task back
// for an audit trail. The failure is logged at error level and counted in
// ctdispatch.worker.record_failures (attribute record: started or outcome).
//
// A worker without Config.Outbox records nothing and links no Parquet
// code; one that passes a parquetbox.Outbox (on a root of its own, which
// ctdispatch query and console read with --worker-outbox) links it.
//
// # Observability
//
// Each answered request is logged once through Config.Logger (debug when
// done or duplicate, warn for retries and refused tokens, with the
// refusal and its full reason as error, error for failures, rejections,
// unavailable keys and panics, with the stack; the record carries the
// trace and span IDs of the request's span) and counted in two
// OpenTelemetry instruments with an "outcome" attribute, and a "refusal"
// attribute for a refused token: ctdispatch.worker.deliveries (requests)
// and ctdispatch.worker.duration (seconds from arrival to answer). A third,
// ctdispatch.worker.record_failures, counts delivery records the outbox
// could not keep.
//
// # Tracing
//
// With Config.TracerProvider (the global provider by default) each request
// gets a consumer span, "process <queue>", linked to the producer span
// whose context the task's traceparent header carries (read with
// Config.Propagator, the global one by default). Its parent is the span the
// request's context already holds (a server span, when the worker is
// wrapped in one); when it holds none, the producer's context is the
// parent, so that Dispatch, each delivery and the handler's work are one
// trace: a Cloud Tasks delivery carries one message, the case in which
// OpenTelemetry's messaging conventions let a consumer continue the
// producer's trace. Config.TraceLinkOnly keeps only the link, and the
// delivery starts a trace of its own. The inbox transaction and the
// handler run in the span, so the handler's own spans nest under it. It carries the delivery's retry and
// execution counts and its outcome (ctdispatch.outcome: done, duplicate,
// rejected, retry, panic, …); ADR 0014 lists the attributes. A delivery's
// records keep the span's trace_id and span_id, and the worker's log
// records carry them too. While no provider is set, no span is made.
package worker
