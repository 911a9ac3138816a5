// Package pgbox is an outbox.Outbox in PostgreSQL, reached through
// database/sql (pgx's stdlib driver: sql.Open("pgx", url)), for
// dispatchers on several machines that must share one linearizable record
// of every dispatch and timer, or whose local disk does not outlive them
// (Cloud Run, pods without volumes).
//
//	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
//	…
//	box, err := pgbox.New(db, pgbox.Config{})
//	…
//	d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{…})
//	…
//	d.Close(ctx)
//	box.Close() // stops the exporter, when Config.Export runs one
//
// Create the tables first, once per database, with Migrate or
// "ctdispatch migrate --outbox postgres://…"; both are idempotent and safe
// to run from several processes at once. A schema that exists is left as
// it is: a role that owns its schema, made for it by an administrator
// (CREATE SCHEMA jobs AUTHORIZATION app), migrates without CREATE on the
// database, and a statement the role may not run is named in the error
// with the privilege it needs. A dispatcher made on the outbox checks once
// that the tables exist (Check; cloudtasks.Config.SkipOutboxCheck skips it
// for a service that starts before its migration job).
//
// A write whose answer is lost (the connection dropped while the
// statement committed, the server shut down under it) may have committed:
// its error matches outbox.ErrKeptUnknown, and a dispatcher says the
// pending record's state is unknown rather than unwritten. A statement
// the server refused kept nothing.
//
// # Tables
//
// Three tables (and the intents table, below), named
// Config.TablePrefix followed by the outbox table's own name
// (ctdispatch_dispatch_outbox, ctdispatch_timers, ctdispatch_deliveries)
// in Config.Schema, hold one row per record: the
// columns of outbox.Record under their Parquet names, the record's
// version, and a claim (dispatch_outbox and timers) for Recover. A row is
// never updated except for its claim, so a table is the history of every
// ID. A unique index on (ID, version) for versions above 0 makes the
// conditional append linearizable.
//
// PostgreSQL 15 is the oldest version supported, and the one the tests
// run (Debian's package, through internal/testtools/pgtest); nothing
// beyond plain PostgreSQL is used: no extension, no superuser.
//
// # Conditional appends
//
// Append inserts a record in one statement, which commits before Append
// returns. A record whose Version is above 0 is inserted only if no row of
// its ID has that Version or a higher one; otherwise Append returns an
// *outbox.VersionConflictError whose Current is the newest record, read
// on the primary: a writer cannot write over a state it did not read, and
// the loser answers from the winner. Of two writers of one version, the
// unique index lets one through and makes the other wait for its commit
// and then refuses it. Version 0 is unconditional, as the seam says.
// Latest, Lookup and Pending read the database they are given: give New
// the primary's, never a replica's, and every read sees every write that
// committed before it began, from any process.
//
// # Round trips
//
// A dispatch costs two round trips: the pending record before CreateTask
// and the outcome record after it. The first is Reserve (outbox.Reserver):
// the dispatcher tries a new ID's first record without reading, and the
// statement that refuses it, when the ID has records, returns them, so a
// repeat of a known ID costs that one round trip. Appends that arrive
// while others are on their way queue and go in one statement (group
// commit): one statement, one commit and one WAL flush for all of them,
// each record under its own condition, at most four such statements at
// once, an ID in at most one of them. Size the pool for that and for the
// reads: database/sql keeps two idle connections by default.
//
// # Durability modes
//
// Append's done is called with nil after the commit, so a kept record is
// as durable as the server's synchronous_commit makes a commit (on, by
// default: flushed to the primary's disk, or to a standby's with
// synchronous replication). Because Append commits before it returns, the
// dispatcher's modes differ only in when the outcome is waited for:
//
//   - overlapped (cloudtasks.DurabilityOverlapped, the default): the
//     pending record commits before CreateTask is called (the overlap of
//     the two that the Parquet store gives does not happen here); the call
//     is answered after CreateTask and the outcome commits after the
//     answer.
//   - strict (cloudtasks.DurabilityStrict): the pending record commits
//     before CreateTask; the call is answered once the outcome has
//     committed.
//   - interval and memory are the Parquet and in-memory stores' modes:
//     they do not apply to this store (the CLI refuses them with a
//     postgres:// outbox).
//
// So in every mode a process that loses the race for the pending record
// (another process wrote that version first) never calls CreateTask: its
// Append is refused and the dispatcher answers from Current, the winner's
// record. A process can only have called CreateTask and then lose the race
// for its outcome record, when another process read its pending record
// and moved the ID on meanwhile (a repeat that took it for stale, or
// Recover). The task exists in either case, created by one of them under
// its deterministic name; the loser's own answer is created or
// already_existed from its CreateTask. In overlapped mode it has answered
// already and its outcome record is refused; in strict mode the refusal
// (ErrVersionConflict) comes before the answer, and the winner's record
// says what is known: already_existed, or pending while the winner's own
// call is on the wire.
//
// # Intents: dispatching inside the caller's transaction
//
// A fourth table (Config.TablePrefix + "intents") holds, per ID, the
// encoded CreateTask request that a dispatcher's DispatchTx or
// ScheduleTimerTx wrote inside the caller's transaction (SQLTx, or
// pgxtx.Tx for pgx), beside the ID's pending record: both commit with the
// caller's change or not at all (AppendIntent). A DispatchManyTx batch
// costs two statements in that transaction however large it is
// (outbox.BulkIntents): LatestManyTx reads every ID's rows, and
// AppendIntents writes every pending record and intent, each record under
// its own condition, and notifies once. Relays claim committed
// intents of their queues in one short statement with FOR UPDATE SKIP
// LOCKED (ClaimIntents), create the tasks outside any transaction, record
// the outcome with a conditional Append over the intent's pending
// version, and delete the intent (DropIntent). ClaimPending leaves IDs
// with an intent to the relays. A relay that stops, or whose outcome the
// database failed to record, gives its claims back (ReleaseIntents); a
// claim whose answer a crash lost is taken back by the outbox's next
// claim.
//
// # Notifications
//
// The statement that records an intent also runs NOTIFY on the channel
// NoticeChannel names ("public.ctdispatch_intents" by default), so that
// relays listening there (cloudtasks.Config.Listener, package pgxlisten)
// create the task at the commit instead of at their next poll: a
// transaction that rolls back notifies nobody. PostgreSQL commits the
// transactions that notified one at a time, each with its own WAL flush,
// so an outbox notifies at most once per Config.NotifyGap (10ms); the
// relay that a notification woke looks again one gap later for the
// transactions that sent none. ReleaseIntents notifies too, and
// NotifyOutcomes tells listening WaitOutcome calls that a relay recorded
// outcomes. Config.NoNotify turns them off.
//
// # Recovery, claims and retention
//
// ClaimPending (outbox.Claimer, which a dispatcher's Recover uses when
// its outbox has it) picks stale pending records in one short statement
// with FOR UPDATE SKIP LOCKED and claims them for a while, so several
// recovering processes share the records instead of each asking Cloud
// Tasks about all of them. Recover calls GetTask outside any transaction
// and writes its verdict as a conditional append over the version it
// read: if the ID moved meanwhile, the verdict is refused.
//
// Retain deletes the whole history of IDs finished longer ago than its
// argument, in batches of at most 1,000 IDs per statement; an ID still
// pending is kept however old, and so is one with a state not yet
// exported once an exporter has run. "ctdispatch retain --outbox
// postgres://…" runs it.
//
// # Export to Parquet
//
// An Exporter writes every row of the three tables, once, to Parquet
// tables in outbox/parquetbox's layout (a directory or a bucket), so that
// analysts query this store's history with the same DuckDB or BigQuery
// queries as a Parquet outbox's, and "ctdispatch compact", "stats" and
// the manifests work on the exported tree. It writes through an
// outbox.RunWriter that the program opens (ExportConfig.Open: a
// *parquetbox.Outbox opened read-only), so this package links neither
// parquet-go nor the bucket drivers. Config.Export runs one inside
// every dispatcher's outbox; "ctdispatch export --outbox postgres://… --to
// DIR" runs one alone. Rows go in numbered batches: a batch is claimed in
// one short transaction under an advisory lock, which marks up to
// BatchRows rows of each table that are in no batch yet (the export_batch
// column) and records the batch with a lease (the export_batches table);
// only then are its rows read and written, as files named
// b<k>of<n>-<source>-<batch>.parquet, and the batch marked written. So a
// batch's rows and file names are fixed before any file exists, a re-run
// after a crash (by any exporter, once the lease has expired) writes the
// same files again, several exporters never write a row twice, and a
// transaction that commits after a later one's rows were exported still
// has its rows exported, by the next batch. With the defaults a committed
// change is in Parquet within 30 s (Interval; 45 s with several exporters)
// plus the time its batch takes to write. The exported tree holds each
// table's schema file (a Parquet file with its columns and no rows) from
// the first pass on, as a dispatcher's own root does, so DuckDB's globs
// of a table nothing was exported to yet find no rows instead of failing.
//
// A row is marked exported only once a file holds it. A row no
// dispatcher can have written (outbox.Record.Distrust: a cloud_task_id
// that is not its ID's hash, say, typed in by hand or left by another
// tool) is not written and not marked: it is marked refused, stays in the
// table, keeps its ID from Retain and is never claimed again. Each pass
// reports such rows (ExportStats.Refused and RefusedSample, a warning to
// ExportConfig.Logger) and counts them in MetricExportRefused. Refused
// lists them with the reason; DeleteRefused deletes them and
// QuarantineRefused moves them whole into the export_quarantine table;
// "ctdispatch export refused --outbox postgres://… [--delete |
// --quarantine]" runs these.
//
// # Observability
//
// One metric goes to ExportConfig.MeterProvider (OpenTelemetry; no-op by
// default):
//
//	ctdispatch.export.refused_rows  counter  table
package pgbox
