// Package chaos is ctdispatch's chaos suite: scenarios that put the
// dispatcher, the outbox and the emulator under several processes, kills,
// injected faults and bad input, and check afterwards that every dispatch
// happened exactly once and nothing acknowledged was lost. `ctdispatch
// chaos` and this package's tests run it.
//
// # Scenarios
//
//   - herd: three ctdispatch processes, each with its own processor UUID,
//     dispatch the same 10,000 requests (a --from file) on one outbox root
//     and one in-process emulator at once. Held: exactly 10,000 tasks, each
//     ID answered "created" once across the processes, one "created"
//     record per ID, every latest record terminal.
//   - crash: a ctdispatch process dispatching a batch is SIGKILLed at 20
//     random points (after a random number of new answers, or a random
//     delay from its start); after each kill a new process runs `recover`
//     and the batch runs again in a new order. Held: after every kill each
//     request the killed process had printed is recorded terminal; at the
//     end one task per ID, every record terminal, no damaged file.
//   - faults: the library's Dispatcher sends every request twice while the
//     emulator injects Unavailable and DeadlineExceeded (half of them after
//     creating the task) and latency; then a quarter as many requests get
//     a single call each, so faults leave them pending, Recover (under
//     GetTask faults) resolves them and the caller repeats them. Held: one
//     task per ID, no ID answered "created" twice, every record terminal.
//   - bad-input: malformed IDs, payloads over 1 MiB, timers beyond 30 days,
//     bad URLs, an unknown queue (library and CLI), then damaged Parquet
//     files. Held: each refused with an error naming the field, value or
//     rule; damaged files skipped and named; everything accepted before
//     still recorded and its task present.
//   - recover-herd: a processor that died an hour ago left 2,000 IDs
//     pending, half of them after their task was created. Two ctdispatch
//     processes and the suite's own process dispatch all of them at once,
//     and the suite's dispatcher runs Recover in a loop meanwhile, so
//     Recover and Dispatch meet on one ID inside one process and across
//     processes. Held: no panic or hang, every call answered, one task per
//     ID, no ID answered "created" twice (nor one whose task existed
//     already), and after a last plain run every ID terminal.
//   - disk-full: the outbox lives on a 2 MiB tmpfs with 160 KiB free while
//     a process dispatches 2,000 requests. Held: the process stops with a
//     no-space error instead of creating tasks it cannot record (tasks
//     with no record are at most the 32 calls in flight), every answered
//     request is recorded, and once space returns a new run finishes the
//     batch with one task per ID and nothing lost. Mounting needs root;
//     elsewhere the scenario is reported as skipped, never as passed.
//   - e2e: on a Parquet directory, then on PostgreSQL (a throwaway
//     cluster the scenario starts), three orchestrator processes run 150
//     logical attempts (dispatches, fired retry timers, held heartbeats,
//     cancels) while the emulator delivers them with OIDC tokens to three
//     worker processes that apply an effect row inside their SQL inbox's
//     transaction, with faults at every hop: orchestrators SIGKILLed and
//     SIGSTOPped on answers (Recover by another process meanwhile), a
//     redeploy with another default queue, RPCs that commit then fail,
//     deliveries doubled, lost, delayed, reset and answered past the
//     dispatch deadline (each keyed to the task and its retry count, not
//     to the order attempts arrive in), workers killed at named points
//     before and after their commit or stopped past their lock timeout,
//     connections dropped, clocks offset. Every call and answer
//     goes to a JSON-lines history, and a checker reports lost and
//     duplicate effects (both must be 0), absorbed duplicate deliveries,
//     how each indeterminate call resolved, and whether the outbox, the
//     emulator, the effects and the deliveries table agree.
//
// # Output
//
// Each scenario prints one line, "PASS|FAIL SCENARIO: what was tried; what
// held" (or what broke, or SKIP and why), and the run ends with "N
// passed, N failed" (", N skipped" when the machine could not run one).
// Options.JSON prints objects instead. A failed check is a FAIL line, never
// a panic or an early stop, so one run reports every scenario.
//
// # Repeatability and sizes
//
// Options.Seed drives kill points, batch orders and the emulator's fault
// plan; the first line names it. The default sizes keep a run under a
// minute on two cores; Options.Long (`--long`, CTDISPATCH_CHAOS_LONG=1)
// multiplies requests and kills by LongFactor.
//
// # Child processes
//
// The herd, crash, recover-herd, disk-full, busy-day, e2e and the CLI half
// of bad-input start Options.Binary, the
// ctdispatch executable: `ctdispatch chaos` passes itself; the package's
// tests build it once without the race detector, so the children run at
// full speed while the emulator and checks in the test process are still
// race-checked.
package chaos
