// Package demo runs ctdispatch end to end on one machine: the in-repo Cloud
// Tasks emulator, a worker (package cloudtasks/worker with its in-memory
// inbox) that checks and deduplicates by Idempotency-Key, and a dispatcher
// with a local Parquet outbox. It backs `ctdispatch demo`.
//
// # What it shows
//
// Every attempt is requested twice and a share of CreateTask calls succeed
// on the server but fail on the wire, yet each attempt becomes one task.
// Retry and heartbeat timers are scheduled (twice each) and fired by moving
// the emulator's clock forward. One kind of task makes the worker fail after
// doing its work, so Cloud Tasks delivers it again and the worker's
// deduplication is what keeps the work single.
package demo
