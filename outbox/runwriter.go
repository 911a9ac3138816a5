package outbox

import "context"

// RunWriter is a store's tables as another store exports into them: runs
// of records kept elsewhere, each written under its source's name and
// number. Package outbox/parquetbox's Outbox is one (its Parquet tables,
// opened ReadOnly); package outbox/pgbox's exporter writes through one,
// which the program opens and hands it, so that no store links another.
type RunWriter interface {
	// WriteRun writes recs, records of any of the tables, as run seq of
	// source. Writing the same source, seq and records again writes the
	// same run again, replacing what an interrupted write left, so a
	// writer that stopped before it could record the run as written
	// repeats it. A run of no records writes no rows; it prepares the
	// tables for readers (parquetbox puts each table's schema file in
	// place).
	WriteRun(ctx context.Context, source string, seq uint64, recs []Record) error
	// Close releases the tables; WriteRun is not called after it.
	Close() error
}
