// Package lakehouse publishes an outbox's tables (dispatch_outbox, timers,
// deliveries) as Apache Iceberg tables (format v2, through
// github.com/apache/iceberg-go), so that BigQuery, DuckDB's iceberg_scan,
// Spark, Trino and other engines read a consistent snapshot of them while
// writers convert logs and compactions fold files underneath: a snapshot
// names exactly the files the store's own readers treat as live, a commit
// swaps snapshots atomically, and a snapshot stays readable until it
// expires. The outbox's files are registered as they are, never
// rewritten; the Hive layout stays, so a plain glob still works.
//
// Only this package (and the program that compacts) links iceberg-go and
// Arrow: a program that only dispatches does not.
//
// # Turning it on
//
// Enable records the choice in the root (<root>/_iceberg/publication.json);
// while it is there, compaction and retention keep the files they fold or
// drop on storage for this package to remove. Publish, run by the process
// that compacts after each compaction, commits the snapshots. Disable turns
// it off; the root is then as it was before.
//
// # Catalogs
//
// A directory root uses the file-based catalog (iceberg-go's hadoop
// catalog), with its metadata under <root>/_iceberg/<namespace>/<table>/:
// no server, and never inside a table's directory. A bucket root needs a
// catalog that commits atomically: PostgreSQL (iceberg-go's SQL catalog,
// Config.Catalog "postgres://…") or an Iceberg REST catalog
// ("https://…"); the file-based catalog is refused there. The tables'
// metadata still lives under <root>/_iceberg/.
//
// The SQL catalog keeps two tables, iceberg_tables and
// iceberg_namespace_properties, which iceberg-go names without a schema,
// so PostgreSQL would put them in the first schema of the connection's
// search_path (by the server's default a schema named as the user, when
// one exists). This package sets every connection's search_path to one
// schema: the one the URL's search_path parameter names
// ("postgres://…/db?search_path=ctdispatch", for a PostgreSQL outbox's
// export the outbox's schema), created when missing, or
// DefaultCatalogSchema ("public") when the URL names none. A search_path
// of several schemas, or a name PostgreSQL would fold or need quoted, is
// refused by Enable and Publish with an error naming it.
//
// # Schema
//
// The tables are format v2, partitioned by day(created_at) under the
// partition name created_date, the day the files' created_date=
// directories name. Every column is optional (files older than a column
// lack it) and integers are long (create_calls is INT32 in some files and
// INT64 in others; Iceberg reads an int as a long). The files carry no
// Iceberg field IDs; the tables' name mapping finds their columns by name.
//
// # Integrity
//
// A table is published under a lease (_iceberg/leases/), one publisher at
// a time. Publish diffs the live files against the current snapshot and
// makes one commit: an append when files were only added, one replace
// otherwise. Every commit is verified by loading the table again: the
// snapshot it made must be in the history and name exactly the files
// computed; a lost one is made again. A snapshot that would name a file
// twice is refused before it reaches the catalog, including when
// iceberg-go's commit retries (on: commit.retry.num-retries) rebuild it.
//
// # Nothing vanishes under a query
//
// Iceberg deletes no data file. Snapshots that stopped being current more
// than Config.Grace (an hour) ago expire, and only then are the files they
// alone named removed, through the store, which refuses to remove a live
// file. Ages are measured by Config.Clock: each snapshot a publisher
// commits records that clock's time in its summary
// (ctdispatch.committed-at), as iceberg-go stamps snapshots with the
// machine's clock. Status reports each table's current snapshot; ReadAsOf reads a
// table as an older snapshot had it.
//
// # Errors
//
// ErrNotEnabled, ErrCatalogMismatch, ErrBusy (a *BusyError), ErrLeaseLost,
// ErrDuplicatePath and ErrNoSnapshot are the sentinels; configuration
// errors name the Config field, the value and the rule.
package lakehouse
