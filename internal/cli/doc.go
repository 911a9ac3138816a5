// Package cli implements the ctdispatch command line. Each command is built
// by a function that takes an *Env (output writers, logger, environment), so
// the whole CLI runs in-process in tests exactly as it does from main.
//
// # Output and exit status
//
// Results go to the Env's Out and nothing else; an error is one line on Err
// (library logs only with -v). Run returns 0 on success, 1 when the
// operation failed or found nothing, 2 for a usage mistake (unknown command
// or flag, extra argument, bad flag value), 3 when query or stats
// printed an answer that may be incomplete because files were skipped, and
// 4 when compact stepped back from a unit another compaction committed
// first (parquetbox.ErrUnitLost).
//
// # Connections
//
// dispatch, timer and recover reach the emulator named by --emulator or
// $CLOUD_TASKS_EMULATOR_HOST (checked as HOST:PORT), or Cloud Tasks with
// application default credentials. The endpoint must answer within a few
// seconds, or the command stops naming the address and the cause; on a
// terminal each retry of a transient failure is shown on stderr.
//
// # Outboxes in buckets
//
// --outbox takes a directory or a bucket URL: gs:// always (through
// internal/gcsjson, which keeps start-up fast), s3:// when built with
// -tags s3, mem:// for tests. Commands that write need --log-dir.
//
// # Memory
//
// A dispatcher writing to an outbox runs under a soft memory limit of 160
// MiB (runtime/debug.SetMemoryLimit) unless $GOMEMLIMIT is set, so the
// collector keeps a long run within the outbox's memory budgets instead of
// letting the heap double. Env.SetMemoryLimit is the seam; in-process
// callers that leave it nil keep their own limit.
package cli
