// Package parquetbox is the Parquet implementation of outbox.Outbox, the
// durable record of every dispatch and timer: an append-only log per
// process that rolls into Parquet files analysts can query with DuckDB or
// BigQuery, and that a restarted dispatcher reads to learn what it already
// did. Open one and hand it to cloudtasks.NewDispatcher. It knows nothing
// of Cloud Tasks.
//
// # Layout
//
//	<root>/dispatch_outbox/created_date=YYYY-MM-DD/*.parquet   one row per state of a task attempt
//	<root>/timers/created_date=YYYY-MM-DD/*.parquet            one row per state of a retry or heartbeat timer
//	<root>/deliveries/created_date=YYYY-MM-DD/*.parquet        a worker's outbox: one row per state of a delivery
//	<root>/<table>/created_date=1970-01-01/_schema/empty.parquet  the table's columns, no rows (see below)
//	<root>/wal/<processor>-<seq>.wal                           each process's write-ahead log
//	<root>/wal/<processor>.lock                                held while the process lives
//	<root>/wal/<processor>.json                                what the process announced (its default queue)
//	<root>/_leases/<table>/<partition>.<seq>                   compactions' leases
//	<root>/_commits/<table>/<unit>.<generation>                what each compaction made visible (see Compact)
//	<root>/_manifests/<table>                                  what Compact saw of each table file, for lookups
//	<root>/_iceberg/                                           the tables' Iceberg publication (see PublicationKey)
//
// Tables are partitioned the Hive way by the UTC day an ID was first
// recorded (its created_at, which Append keeps for every later state of
// the ID), so all states of an ID share a partition and DuckDB, BigQuery,
// Spark and Trino prune by date. An entry under <table>/ outside this
// layout (a file directly under it, a directory not named
// created_date=<a real date>, a symbolic link, a partition the process
// cannot read) is never read, and reported where damaged files are
// (Damaged, Stats' and Compact's Skipped, matching ErrOutsideLayout), so an
// answer that may miss its records never looks complete.
//
// An outbox opened for writing puts a schema file in each table, with the
// table's columns and no rows, so that a query globbing <table>/**/*.parquet
// returns no rows before the first publication instead of failing for want
// of files. It lies below the files of a partition, where this package
// never reads: it is not counted, compacted or reported.
//
// Each process (named by its processor UUID) writes only files of its own,
// so any number of processes share one root without coordinating. Parquet
// files appear atomically (written under a hidden name, synced, renamed);
// readers ignore hidden files. Because nothing orders two processes'
// first records of an ID, a process announces its default queue
// (outbox.Announcer: Announce, Announced; the dispatcher does it when it is
// made) beside its lock, and the processes sharing the log directory read
// the live ones' announcements: two processes with different default
// queues can each create an ID's task in their own (docs/consistency.md).
//
// # Durability
//
// Append encodes the record as a checksummed frame and hands it to a single
// writer goroutine, which writes every waiting frame with one write and one
// fsync (group commit) and then calls every caller's done. In the default
// Durable mode done hears of the record after that fsync; in Interval mode
// after the write, and the log is synced every FlushInterval, so a machine
// crash may lose the last interval.
//
// Append itself returns at once, so a caller overlaps the group commit
// with its own work (the dispatcher's create call) without a goroutine of
// its own; done runs on the writer, so a caller that has nothing to wait
// for but something to release (the dispatcher's table of calls in
// flight) does so there. outbox.AppendAndWait waits for done.
//
// A crash at any instant loses no acknowledged record: on Open, the log of
// this processor and of every dead processor (one whose lock is free) is
// converted to Parquet; a torn last frame fails its length or checksum and
// is dropped, and logged with path and offset.
//
// # Reading
//
// Memory does not grow with the outbox: this process's own IDs are
// indexed within Config.IndexBytes (32 MiB) and IndexLimit, older IDs
// being answered from the files; between reads a table keeps at most
// MaxOpenFiles (256) files open and their footers and bloom filters within
// FileCacheBytes (64 MiB), least recently used closed first; listings are
// reused for RefreshInterval.
// Latest, Lookup and Pending see this process's records in memory, the
// live logs of other processes (read incrementally), and every Parquet file;
// their view of other processes is at most Config.RefreshInterval old.
// Latest takes the newest of all of them by version (an ID this process
// wrote is read in others' logs and the files too, so another process's
// later cancel is seen), and Append refuses a record whose version any of
// them already holds (outbox.ErrVersionConflict); see docs/consistency.md.
// LatestFresh (outbox.FreshReader) reads others' logs and files again
// whatever RefreshInterval allows, and says how long another process's
// record may still be unseen: 0 when the logs are in the root directory,
// PublishInterval on a bucket. On a directory it reads only what changed
// since the last look: the frames appended to the log segments it
// follows, and a new listing of the logs or of a table only when a
// directory the last listing read has gained, lost or renamed an entry
// (a stat of each directory, held open, tells by its change time, which
// the filesystem takes from the machine's clock; a listing made within
// 100 ms of a change to a directory it read is not trusted to stand, as
// a second change in the same tick of that clock would leave the time
// equal).
// Records of other processes' logs are indexed by ID. For this a reader
// holds open each directory its last listing of a table read (the table's,
// up to 64; the rest are stat'ed by path), the log directory, and the
// log segments of other processes it follows.
// A lookup by ID skips row groups by min/max statistics and
// bloom filters and reads only the pages the page index admits, so it reads
// a small fraction of a large file; a Query with Summary set reads only the
// columns of a status view (ID, cloud_task_id, status, error code, calls,
// times, processor), sparing a page of each other column. Files are sorted by ID. A damaged or
// foreign file is logged with its path and the reason, listed by Damaged,
// and skipped; it never hides the other files.
//
// # Manifests
//
// An ID does not name its day, so a lookup by ID or cloud_task_id would
// have to open the footer of every file of every partition. Compact
// therefore writes, per table, a manifest (<root>/_manifests/<table>,
// outside the table's directory, where DuckDB, BigQuery and Spark never
// look): every file it saw, with its size and modification time, and for
// each row group its row count, ID bounds and where the bitsets of the
// bloom filters of the ID and of cloud_task_id lie. A lookup reads the
// manifest, computes the one 32-byte block of a bitset the value hashes
// to, reads just that block of each row group the bounds admit, and opens
// only the files (and reads only the row groups) a filter admits. In a
// compacted file, which holds one state per ID, a lookup by cloud_task_id
// stops at its first match (not in the deliveries table, where the
// deliveries of one task are as many IDs).
//
// A manifest can never make an answer wrong: an entry is used only for a
// listed file of the same name, size and modification time; files it does
// not know (converted log segments written since, outputs of a later
// compaction) are opened as without one; entries of files no longer
// listed are ignored; a damaged, truncated, foreign or non-regular
// manifest is ignored with one log line. It is written atomically (a
// temporary file renamed into place, a single object write on a bucket),
// and Compact refreshes it every run, also when every partition was
// untouched (ctdispatch compact prints what it did with it). Files
// already open (a long-running dispatcher) are read the usual way, with
// their bloom filters in memory. To save time, a lookup reads the manifest,
// probes and opens its candidates while the files are being listed; what
// it decided about a file is kept only if the listing then shows the
// version the manifest describes.
//
// # Trust
//
// The outbox believes nothing it did not check, because a Dispatch that
// finds a record skips its CreateTask:
//
//   - On opening a file, every column it reads must have the table
//     schema's physical and logical type (strings BYTE_ARRAY, times INT64
//     TIMESTAMP, create_calls INT32 or INT64, none repeated). A file that
//     differs (an INT32 status, say) is foreign: skipped, listed with the
//     reason by Damaged and in Stats and Compact's Skipped, logged once,
//     never a crash. A footer whose counts cannot be true of the file's
//     size is damaged, as is a file the Parquet library panics on (the
//     panic is recovered at the file boundary): the fuzz target
//     FuzzReadParquet feeds mutated files to every read path.
//   - A row whose cloud_task_id is not the hash of its ID (naming's
//     CloudTaskID), whose ID is not an internal ID, or whose status is
//     unknown is foreign (outbox.ErrForeignRecord): Latest, Lookup and Pending
//     never return it, Stats counts it in ForeignRows, and Compact leaves
//     it out of its output and its file in place (listed in Kept). Append
//     refuses such a record, and fills in an empty CloudTaskID.
//   - Only regular files are opened: a named pipe or device named
//     x.parquet or x.wal is skipped and listed, never opened (opening a
//     pipe would block forever).
//
// # Availability
//
// When the log cannot be written (a full disk, a permission taken away),
// the outbox fails closed: the append that met the error and every later
// Append return at once an *UnavailableError matching
// ErrUnavailable, naming the cause and the path; nothing is accepted that
// could not be made durable. The writer retries a fresh segment with
// backoff (100ms doubling to 10s, on Config.Clock) and takes appends again
// as soon as one succeeds, without a restart; records accepted before stay
// readable and reach Parquet (conversions retry too).
//
// # Errors
//
// Bad records and options are refused with errors that name the field, the
// value and the rule. A file that cannot be read is a *FileError (path and
// reason) matching ErrDamaged, or ErrForeignFile for valid Parquet that is
// not an outbox table; it is skipped, never fatal. A foreign record is
// refused with outbox.ErrForeignRecord, as every store refuses one.
// ErrUnavailable, ErrClosed, ErrProcessorInUse and ErrReadOnly are the
// other sentinels. A cancelled context is checked first: a call with one
// never writes.
//
// # Observability
//
// The outbox logs through Config.Logger (log/slog) only what needs a
// person: skipped files, dropped torn log tails, failed conversions, and
// the replay of a stopped processor's log. Damaged lists the skipped files;
// Stats counts records by status, queue, kind and processor. A
// CompactTrace set in CompactConfig.Trace hears a compaction's progress
// and what it did to each unit, each table and each manifest.
//
// # Buckets
//
// The tables (not the log) can live in a bucket through gocloud.dev/blob:
// Config.Root "mem://", or "gs://…" and "s3://…" once package
// outbox/cloudblob is imported, or an opened bucket in Config.Bucket; the
// log then goes to Config.LogDir.
//
// # Compaction and retention
//
// Compact works unit by unit: a unit is one hash bucket (Config.Buckets,
// in each file's name) of one partition. Within a unit, each converted
// log segment is a sorted run, and runs of similar size are merged,
// size-tiered with a fan-out of 4 (ADR 0011), into files sorted by ID
// holding only the latest state of each ID, split at
// CompactConfig.TargetFileBytes; so a row is rewritten about log₄(runs)
// times over a day, and a unit within its tiers' bounds is not rewritten.
// Terminal records older than their queue's retention are dropped only
// by a merge of every run of their unit (so no older pending state of a
// dropped ID survives), and a unit whose every row is past retention is
// removed whole, without a rewrite. Each unit is compacted under a lease
// (an object created only if absent: O_EXCL on a disk,
// WriterOptions.IfNotExist on a bucket), with expiry for a crashed
// holder, so two compactions of one root at once share a day's buckets;
// a unit held by another is reported busy and skipped. A compaction's
// outputs become visible only through the unit's next commit record,
// created only if absent, which readers honour: one that lost its unit
// (paused past its lease while another committed) cannot make its outputs
// visible, and steps back with ErrUnitLost, so no row is counted twice
// and nothing retention dropped comes back. Inputs are removed after the
// commit, so appends continue meanwhile and an interrupted compaction
// loses nothing. Last, the table's manifest is refreshed (see Manifests).
//
// # Publication
//
// While the root object PublicationKey exists (the tables are published
// as Iceberg tables by package outbox/lakehouse), a file a reader has
// read is never removed nor written over by this package: compaction
// leaves the inputs it folds (and the files of units retention drops) on
// storage, hidden by the unit's commits, and a run written again keeps the
// file already there. LiveFiles names the files the readers read now,
// ReplacedFiles those kept, and RemoveReplaced removes kept ones, never a
// live one. PutRootObject and its siblings keep the publisher's own small
// objects under IcebergDir, beside the tables.
//
// # Other stores
//
// Memory is an in-memory outbox with the same rules, for a dispatcher
// without files and for tests; package outboxtest is the conformance
// suite both pass, and any other implementation can run.
package parquetbox
