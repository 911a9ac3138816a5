package parquetbox

import "github.com/ctdispatch/ctdispatch/outbox"

// compactStats reports a compaction, per table, as Compact's trace saw
// it.
type compactStats struct {
	// Tables holds one entry per table compacted, in order.
	Tables []TableCompaction
}

// TableCompaction reports the compaction of one table: the sums over its
// units, and each unit. CompactTrace.Table receives it.
type TableCompaction struct {
	// Table is the table.
	Table outbox.Table
	// FilesIn and FilesOut count Parquet files before and after.
	FilesIn, FilesOut int
	// RowsIn counts rows read; RowsOut rows written (one per ID kept).
	RowsIn, RowsOut int64
	// Dropped counts IDs removed by retention.
	Dropped int64
	// BytesIn and BytesOut are the sizes of the files read and written.
	BytesIn, BytesOut int64
	// Output is the path of the first file written ("" if none was).
	Output string
	// ForeignRows counts rows left out of the output because this system
	// cannot have written them (see ErrForeignRecord).
	ForeignRows int64
	// Kept lists the inputs left in place because they hold foreign rows:
	// compaction never deletes what it did not fold in.
	Kept []string
	// KeptForPublication counts the inputs folded in (or dropped by
	// retention) but left on storage, invisible to the store's readers,
	// because the tables are published (see PublicationKey).
	KeptForPublication int
	// Skipped lists damaged or foreign files left out, each with its path
	// and the reason (a *FileError).
	Skipped []error
	// Partitions reports each unit (a partition, or a bucket of one), in
	// order.
	Partitions []UnitCompaction
	// Manifest reports the table's manifest, refreshed after the
	// partitions (also when every partition was untouched).
	Manifest ManifestRefresh
}

// UnitAction says what compaction did with a unit.
type UnitAction string

// The actions of a UnitCompaction.
const (
	// UnitCompacted: its files were merged into sorted files.
	UnitCompacted UnitAction = "compacted"
	// UnitUntouched: its runs are within the tiers' bounds (and nothing
	// is to drop), so nothing was rewritten.
	UnitUntouched UnitAction = "untouched"
	// UnitDropped: every row was past retention; its files were removed
	// without being rewritten.
	UnitDropped UnitAction = "dropped"
	// UnitBusy: another compaction holds its lease; skipped.
	UnitBusy UnitAction = "busy"
	// UnitLost: another compaction committed the unit while this one
	// worked on it (its lease ran out); this one discarded its outputs and
	// changed nothing (see ErrUnitLost).
	UnitLost UnitAction = "lost"
)

// UnitCompaction reports one unit of a compaction: a partition, or one
// bucket of a partition (see Config.Buckets). CompactTrace.Unit receives
// it.
type UnitCompaction struct {
	// Partition is the partition directory (created_date=2026-11-23).
	Partition string
	// Bucket is the unit's bucket within the partition (b3of8), or "" for
	// the partition's files without a bucket.
	Bucket string
	// RunsBefore and RunsAfter count the unit's runs (sorted files, or
	// sets of files one merge wrote) before and after; Merges counts the
	// merges done, and Full says whether one of them took every run.
	RunsBefore, RunsAfter, Merges int
	Full                          bool
	// Action says what was done; Reason says why when it was skipped.
	Action UnitAction
	Reason string
	// FilesIn and FilesOut count files read and written.
	FilesIn, FilesOut int
	// RowsIn, RowsOut, Dropped, ForeignRows, BytesIn, BytesOut and
	// KeptForPublication are as in Table.
	RowsIn, RowsOut, Dropped, ForeignRows int64
	BytesIn, BytesOut                     int64
	KeptForPublication                    int
	// Outputs are the paths of the files written.
	Outputs []string
}

// ManifestAction says what compaction did with a table's manifest.
type ManifestAction string

// The actions of a ManifestRefresh.
const (
	// ManifestWritten: the manifest was written anew.
	ManifestWritten ManifestAction = "written"
	// ManifestCurrent: the manifest already listed every file as it is.
	ManifestCurrent ManifestAction = "current"
	// ManifestFailed: it could not be written; lookups open every file
	// it does not list, so answers stay right, only slower.
	ManifestFailed ManifestAction = "failed"
)

// ManifestRefresh says what compaction did with a table's manifest: the
// small file that lets a lookup by ID or cloud_task_id skip opening files
// that cannot hold the value.
type ManifestRefresh struct {
	// Action says what was done.
	Action ManifestAction
	// Path names the manifest.
	Path string
	// Files and RowGroups count what the manifest lists.
	Files, RowGroups int
	// Err says why it could not be written (ManifestFailed).
	Err error
}

// CompactTrace receives a compaction's report while it runs, as
// net/http/httptrace's ClientTrace receives a request's events: set it as
// CompactConfig.Trace to print or count what Compact does to each unit
// (ctdispatch compact prints a line per unit and per table from it).
// Each function may be nil; they are called from the goroutine that
// called Compact, one at a time.
type CompactTrace struct {
	// Progress is called as rows are read, with the rows read so far and
	// the total of the unit being compacted.
	Progress func(t outbox.Table, done, total int64)
	// Unit is called when a unit is done (or skipped), with what
	// happened to it.
	Unit func(t outbox.Table, u UnitCompaction)
	// Table is called when a table is done, or stopped by an error, with
	// its sums, its units and its manifest.
	Table func(TableCompaction)
}
