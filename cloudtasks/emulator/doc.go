// Package emulator is an in-process Cloud Tasks emulator: a real gRPC
// server that the official client (cloud.google.com/go/cloudtasks/apiv2)
// talks to unmodified, in the style of pubsub's pstest.
//
//	import ctapi "cloud.google.com/go/cloudtasks/apiv2" // ctdispatch's own package is also named cloudtasks
//
//	srv, err := emulator.New(emulator.Config{Queues: []emulator.QueueConfig{{Name: queue}}})
//	defer srv.Close()
//	client, err := srv.NewClient(ctx) // or ctapi.NewClient(ctx, srv.ClientOptions()...)
//
// # What is emulated
//
// Queues (create, get, list with a state filter such as "state: PAUSED",
// update with field masks, delete, purge, pause, resume, and an IAM policy
// per queue that is stored but not enforced) and tasks (create, get, list
// with BASIC and FULL views, delete, run (a task already running is
// dispatched once more), batch create and batch delete as
// finished long-running operations that the client's operations client can
// fetch on the same connection for Config.OperationRetention (1 h, at most
// Config.OperationLimit of them), with each failed request's status under
// its index in the metadata) and locations (ListLocations and
// GetLocation: the emulator knows a location by the queues it holds
// there). CMEK answers codes.Unimplemented. Unset queue fields take the
// service's defaults; a default queue has a burst of DefaultMaxBurstSize.
//
// Requests are checked as the service checks them, with its status codes:
// NotFound for a missing queue or task, AlreadyExists for a taken name,
// InvalidArgument naming the field and the rule (anchored task and queue
// IDs, a task named into another queue, a task size within cloudtasks/internal/tasksize's Max of 10^6 bytes on the wire, schedule_time at
// most 30 days ahead, dispatch_deadline from 15 s to 30 min, URL length,
// a body only with POST, PUT or PATCH).
//
// # Finding what an emulator holds
//
// Only the emulator accepts the wildcard "-" for the project in the name of
// ListLocations ("projects/-") and for the project or location in the
// parent of ListQueues ("projects/-/locations/-"), so a tool given only
// the gRPC address lists everything without knowing a project. The
// ListLocations response also carries the HTTP server's address in the
// x-ctdispatch-emulator-http header. Real Cloud Tasks documents neither.
//
// # Names
//
// A task name stays taken while the task exists and for
// Config.NameReuseWindow (24 h by default) after it was executed,
// exhausted, deleted or purged; a CreateTask with that name gets
// AlreadyExists until the window has passed on the clock.
//
// # Paging
//
// ListTasks returns tasks in name order from an index kept per queue, so a
// page costs O(page size · log n) however many tasks the queue holds.
// Page tokens are opaque: each carries the last name of its page, the time
// it was issued and a MAC, keyed by a secret of the server, over both and
// the request it answers (method, parent, and filter where there is one).
// A token another server issued, one returned for another queue, location
// or filter, a forged or edited one, and one older than 2 hours
// (on the clock, as documented) are InvalidArgument. A valid token
// stays valid when its own task is deleted (the next page starts after its
// name), and a task created between two pages shows on a later page only
// if its name sorts after the token's. The page size may change between
// pages. ListQueues, ListLocations and ListOperations page the same way.
//
// # Delivery
//
// HTTP tasks are sent to their URL when due, within the queue's token
// bucket (max_dispatches_per_second) and max_concurrent_dispatches, never
// from a paused queue, with the service's X-CloudTasks-* headers, the
// task's own headers and body, and an OIDC token signed by the emulator.
// As the v2 HttpRequest docs say, Host comes from the URL, Content-Length
// from the body, and the task's X-Google-* and X-AppEngine-* headers are
// dropped. The token has the claims of a Google ID token (aud is one
// string); its key is served at JWKSURL (JSON Web Keys) and PEMCertsURL
// (PEM by key ID), so Google's own verifiers accept it when pointed there.
// An attempt is bounded by the task's
// dispatch_deadline. A 2xx deletes the task; anything else is retried with
// the queue's backoff (min_backoff doubled max_doublings times, then
// linear, capped at max_backoff) until max_attempts and max_retry_duration
// are both used up, and then the task is deleted. Deliveries records every
// attempt, and each attempt is sent once: net/http sends a request with an
// Idempotency-Key header (or a GET) again on a fresh connection when a
// reused one closes without an answer, and the emulator's requests are
// built so that it does not (also through Config.HTTPClient). Such a
// connection is one failed attempt, retried after the queue's backoff
// with X-CloudTasks-TaskRetryCount 1, so what a worker received and
// Deliveries agree.
//
// # Time
//
// Everything time-based reads Config.Clock. Tests pass a clockwork fake
// clock, advance it, and call RunDue to deliver what has become due and
// wait for the attempts to finish: no sleeps.
//
// # Faults
//
// Config.Faults (or SetFaults) injects error codes, latency and
// "commit then fail" (the call takes effect, the caller sees an error)
// into chosen RPCs at chosen rates, repeatably for a given seed. A
// PerRequest rule fails single requests inside BatchCreateTasks and
// BatchDeleteTasks instead of the whole call.
//
// # Delivery faults
//
// Config.DeliveryFaults (or SetDeliveryFaults) does to deliveries what
// the network and Cloud Tasks' at-least-once delivery do to a worker, so
// that a worker's test can show that its work happens once anyway: the
// worker's 2xx lost on its way back (FaultLoseReply: the task is
// delivered again), an attempt delivered twice after a 2xx
// (FaultDeliverTwice), the connection reset halfway through the body
// (FaultReset), an attempt held back on the clock (FaultDelay), and the
// worker's 2xx withheld until the attempt's dispatch deadline ends it
// (FaultWithhold: the work is done, the attempt failed, the task comes
// again with retry reason DEADLINE_EXCEEDED); FaultDrop answers 200
// without delivering, for a check that must notice lost work. A fault is
// planted on a task by its ID, full name or Idempotency-Key, and stays
// until it has happened once, or drawn at rates from a seed, keyed to the
// task and the attempt so that a seed means the same on any machine. The
// faults act around Config.HTTPClient and wait on Config.Clock; each
// attempt's Delivery.Fault says what happened to it, and
// DeliveryFaults.OnFault reports each fault as it happens, also when a
// wait on the clock begins, so a test on a fake clock knows when to move
// it.
package emulator
