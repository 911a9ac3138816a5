// Package outbox is the durable record of every dispatch and timer: an
// append-only log per process that rolls into Parquet files analysts can
// query with DuckDB or BigQuery, and that a restarted dispatcher reads to
// learn what it already did. It knows nothing of Cloud Tasks.
//
// # Layout
//
//	<root>/dispatch_outbox/*.parquet   one row per state of a task attempt
//	<root>/timers/*.parquet            one row per state of a retry or heartbeat timer
//	<root>/wal/<processor>-<seq>.wal   each process's write-ahead log
//	<root>/wal/<processor>.lock        held while the process lives
//
// Each process (named by its processor UUID) writes only files of its own,
// so any number of processes share one root without coordinating. Parquet
// files appear atomically (written under a hidden name, synced, renamed);
// readers ignore hidden files.
//
// # Durability
//
// Append encodes the record as a checksummed frame and hands it to a single
// writer goroutine, which writes every waiting frame with one write and one
// fsync (group commit) and then answers all their callers. In the default
// Durable mode Append returns after that fsync; in Interval mode it returns
// after the write and the log is synced every FlushInterval, so a machine
// crash may lose the last interval.
//
// A crash at any instant loses no acknowledged record: on Open, the log of
// this processor and of every dead processor (one whose lock is free) is
// converted to Parquet; a torn last frame fails its length or checksum and
// is dropped, and logged with path and offset.
//
// # Reading
//
// Latest, Lookup and Pending see this process's records in memory, the
// live logs of other processes (read incrementally), and every Parquet file;
// their view of other processes is at most Options.RefreshInterval old, and
// Latest answers an ID this process wrote from memory alone. A lookup by ID skips row groups by min/max statistics and
// bloom filters and reads only the pages the page index admits, so it reads
// a small fraction of a large file. Files are sorted by ID. A damaged or
// foreign file is logged with its path and the reason, listed by Damaged,
// and skipped; it never hides the other files.
//
// # Errors
//
// Bad records and options are refused with errors that name the field, the
// value and the rule. A file that cannot be read is a *FileError (path and
// reason) matching ErrDamaged, or ErrForeignFile for valid Parquet that is
// not an outbox table; it is skipped, never fatal. ErrClosed,
// ErrProcessorInUse and ErrReadOnly are the other sentinels.
//
// # Observability
//
// The outbox logs through Options.Logger (log/slog) only what needs a
// person: skipped files, dropped torn log tails, failed conversions, and
// the replay of a stopped processor's log. Damaged lists the skipped files;
// Stats counts records by status, queue, kind and processor.
//
// # Buckets
//
// The tables (not the log) can live in a bucket through gocloud.dev/blob:
// Options.Root "mem://", or "gs://…" and "s3://…" once package
// outbox/cloudblob is imported, or an opened bucket in Options.Bucket; the
// log then goes to Options.LogDir.
//
// # Compaction and retention
//
// Compact merges the Parquet files of a table into one sorted file holding
// only the latest state of each ID, and drops terminal records older than
// their queue's retention. It works on a snapshot of the files, writes its
// output atomically before removing its inputs, and so neither blocks
// appends nor loses data when interrupted.
package outbox
