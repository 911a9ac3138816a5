// Package bench is the load generator behind `ctdispatch bench`: it
// measures, in one process and one run, what each layer of ctdispatch
// costs against a bare, deterministically named CreateTask through the
// official client.
//
// # Modes
//
// create-bare is the baseline: the CreateTask request a careful caller
// writes by hand (hashed task name, the Idempotency-Key and
// X-Ctdispatch-Task-Id headers), no retries. batch-bare sends the same
// requests in BatchCreateTasks calls of BatchSize tasks, one call in
// flight: the baseline of dispatch-batched. dispatch (the default,
// overlapped durability), dispatch-strict, interval and memory call
// Dispatch in each cloudtasks.Durability mode, each over its own outbox;
// dispatch-batched is dispatch with cloudtasks.Config.Batch. timer calls
// ScheduleTimer in the default mode. naming builds the internal ID and its
// Cloud Tasks ID and does no I/O. Every mode shares one emulator, one
// client connection and the same number of callers (batch-bare: one).
//
// # Fairness
//
// Modes run in alternating rounds (each round starting with a different
// mode), so load from other processes on the machine hits all of them
// alike. Before each round the in-process emulator is emptied and the heap
// collected, so no mode pays for another's leftovers. Duplicates follow
// the same pattern in every mode: call i repeats an earlier call's ID when
// a hash of (seed, i) says so.
//
// # Figures
//
// Throughput counts successful calls per second of the mode's rounds.
// Latencies are exact nearest-rank percentiles of every call, failed ones
// included. Allocations per call are the process's heap allocations over
// the mode's rounds divided by its calls; with the in-process emulator
// they include the server's side of each RPC, as does the CPU time per
// 1,000 calls, read from the process's own rusage around each round.
// Ratios divide each mode's throughput by create-bare's, and
// dispatch-batched's also by batch-bare's.
//
// # Latency
//
// Latency makes the in-process emulator delay every call, standing for
// the network and the service, so the dispatcher's own costs are seen at
// the scale they have against the real service.
//
// # Faults
//
// With the in-process emulator, FaultRate fails CreateTask calls with
// UNAVAILABLE and CommitThenFailRate creates the task before failing the
// call. create-bare counts those as errors; the dispatcher retries them,
// so its latency shows the retry policy's backoff.
package bench
