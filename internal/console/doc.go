// Package console is a web console over a Cloud Tasks emulator and an
// outbox: what `ctdispatch console`, `ctdispatch emulator --console-addr`
// and `ctdispatch demo --keep` serve.
//
//	srv, err := console.New(ctx, console.Config{Emulator: addr, Outbox: dir})
//	defer srv.Close()
//	lis, err := console.Listen(console.DefaultAddr, logger)
//	err = srv.Serve(ctx, lis)
//
// # Pages
//
// Queues (state, rate and retry settings, tasks waiting, scheduled and
// running, deliveries per second over the last minute of the emulator's
// clock, response codes of the latest deliveries); the tasks of a queue,
// one ListTasks page at a time with its page token, each with its internal
// ID; one task with its request and delivery attempts; the recent
// deliveries with their X-CloudTasks-* and Idempotency-Key headers; the
// audit trail of an ID (search by internal ID, Cloud Tasks ID or run): its
// states in order with the processor that wrote each and the hand-overs
// between processors, its payload fingerprint and CreateTask calls; a run's
// dispatches and timers on a timeline; and the outbox's files per table and
// partition, the files it skips as damaged or foreign, pending records
// older than Config.StaleAfter, and the count of IDs by status over time.
//
// # Sources
//
// The emulator is reached through the official Cloud Tasks client on its
// gRPC address, so the console works against an emulator in another
// process, and through the emulator's read-only inspection endpoint
// (emuproto.InspectPath on its HTTP address) for what the API cannot tell:
// task counts by state and the delivery log. The gRPC address is enough:
// the console asks ListLocations for the emulator-only wildcard project
// "projects/-", which lists every location holding a queue and tells the
// HTTP address in a response header (see emuproto.Wildcard). Against an
// endpoint that does not take the wildcard, the console lists the queues
// of Config.Locations and counts tasks from one ListTasks page. The outbox is opened
// read-only through its exported API. Either source may be absent; the
// pages that need it then answer 404 saying which flag is missing.
//
// # Staying fast
//
// Every page is bounded: the queue page reads one ListTasks page, takes
// internal IDs from the task's Idempotency-Key header when it hashes to
// the task's ID, and looks the others up in the outbox for at most
// Config.LookupBudget, showing the rest as "looking up…" until the next
// refresh; the outbox page's figures that need every record are computed
// in the background every Config.HealthEvery and shown with their age.
// BENCHMARKS.md has the figures.
//
// # Safety
//
// Pages are rendered by html/template, so task names, headers and IDs,
// which come from users, are escaped. An Authorization value is never
// shown (the emulator redacts it, and the console again). Actions that
// change state (pause, resume, purge, run now, recover) exist only with
// Config.AllowActions; each is a POST carrying a per-process CSRF token,
// and pages may not be framed. Listen warns once when the address is not a
// loopback one, since the console has no login.
//
// # Without JavaScript
//
// Pages and charts (inline SVG) are complete as served. One small embedded
// script, static/live.js, refreshes the live part of a page while the
// "live" box is ticked; nothing is loaded from elsewhere, so the console
// works offline.
package console
