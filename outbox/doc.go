// Package outbox is the record of every dispatch and timer, and of the
// deliveries a worker receives: the Outbox interface a dispatcher (or a
// worker) writes through, the Record it writes, and Memory,
// an implementation held in one process's memory. It does not depend on
// Parquet: the file-backed implementation, whose tables DuckDB and
// BigQuery read, is package outbox/parquetbox, and a program that does not
// import it does not link it.
//
// # Records
//
// A dispatch or timer has a history of records: pending before its create
// call, then an outcome (created, already_existed, failed, not_found,
// cancelled). Its current state is its newest record by UpdatedAt (Newer
// breaks ties the same way everywhere). Records live in two tables,
// dispatch_outbox and timers, chosen by the kind of the ID (TableOf).
//
// A worker's outbox has a third table, deliveries: each delivery of a task
// is its own ID (DeliveryID: the internal ID, '#', a suffix unique to the
// delivery), with a started record and then its outcome, and the columns
// of Record.Delivery. LookupDeliveries finds an ID's deliveries.
//
// # The rules every implementation keeps
//
// Append fills a record in as Record.Prepare says (processor, times,
// cloud_task_id) and refuses one that is invalid (*RecordError, naming the
// field, the value and the rule: times must lie between MinTime and
// MaxTime) or foreign (ErrForeignRecord: a cloud_task_id that is not the
// hash of the ID). Times are kept at microsecond precision in UTC, and
// UpdatedAt strictly increases per ID within a processor. Readers never
// return a foreign record. Package outboxtest checks these rules against
// any implementation.
//
// # Writing your own
//
// An implementation calls Record.Prepare in Append, Record.Trusted on
// everything it reads, and Arrange and SortPending to order what Lookup
// and Pending return; RecordOf builds a record from a naming.ID without
// parsing it again.
//
// Optional interfaces let a dispatcher use what a shared store can do:
// Claimer (recovering processes share the stale records), Reserver (a
// new ID's first record is tried before any read, one round trip instead
// of two), Intents (dispatches recorded inside the caller's transaction,
// Tx, and carried out by a relay after commit), BulkIntents (a batch of
// them read and recorded in one statement each; PrepareIntents holds the
// rules of a batch) and FreshReader (a read fresher than Latest, for a
// store whose Latest may be stale). Package outboxtest's RunIntents
// checks the first four together. A store that
// exports its records to another store's tables writes through a
// RunWriter, which the program opens, so that no store package imports
// another.
//
// # Memory
//
// Memory implements every optional interface a database store does
// (Claimer, Reserver, Intents, BulkIntents, but not FreshReader: its Latest is never
// stale), so a dispatcher over it behaves as over PostgreSQL and the
// tests of transactional dispatch and the relay need no database. Its
// transactions are its own (Begin returns a MemoryTx, which Commit keeps
// and Rollback drops); where a database makes a concurrent writer of the
// same version wait for an open transaction, a Memory lets the writer go
// on and refuses the transaction's Commit with a *VersionConflictError.
package outbox
