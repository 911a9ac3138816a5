package parquetbox

import (
	"context"
	"fmt"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Every table holds a schema file: a Parquet file with the table's
// columns and no rows, which an outbox opened for writing puts in place.
// Engines that glob a table's files (DuckDB's read_parquet, BigQuery's
// external tables) fail when the glob matches nothing, so without it the
// documented queries (<table>/**/*.parquet) would fail on an outbox
// nothing was published to yet, instead of returning no rows.
//
// It sits in a directory of its own inside a partition of its own. The
// partition keeps created_date in every path, as hive partitioning wants,
// and a query of a real day prunes it. The directory puts it below the
// layout's depth: listings read only the files directly in a partition, so
// this package never reads, counts, compacts or lists it in a manifest,
// and neither does a tool that globs <table>/*/*.parquet.
const schemaFileName = partitionKey + "1970-01-01/_schema/empty.parquet"

// writeSchemaFiles puts each table's schema file in place, unless one with
// the table's current columns is there: a file from before a column was
// added is written again, so the columns a query names exist even before
// the first publication.
func (o *Outbox) writeSchemaFiles(ctx context.Context) error {
	for _, t := range outbox.Tables() {
		if o.schemaFileCurrent(ctx, t) {
			continue
		}
		w, err := o.store.create(ctx, t, schemaFileName)
		if err == nil {
			err = writeRecords(w, t, nil)
		}
		if err != nil {
			return fmt.Errorf("outbox: write the schema file %s: %w", o.store.where(t, schemaFileName), err)
		}
	}
	return nil
}

// schemaFileCurrent reports whether table t's schema file is there,
// readable, and has the table's current columns.
func (o *Outbox) schemaFileCurrent(ctx context.Context, t outbox.Table) bool {
	ra, size, err := o.store.open(ctx, t, schemaFileName)
	if err != nil {
		return false
	}
	f, err := openParquet(o.store.where(t, schemaFileName), t, ra, size)
	if err != nil {
		ra.Close()
		return false
	}
	defer f.close()
	return f.HasSchemaOf(string(t))
}
