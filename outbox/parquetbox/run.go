package parquetbox

import (
	"context"
	"fmt"
	"regexp"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// runSource is what may name the writer of a run: a processor's UUID, or
// any name of the same alphabet (file names take it as it is).
var runSource = regexp.MustCompile(`^[0-9a-z][0-9a-z_]{0,63}$|^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

var _ outbox.RunWriter = (*Outbox)(nil)

// WriteRun implements outbox.RunWriter: it writes records kept elsewhere
// (another store's export, such as outbox/pgbox's) into the tables, as a
// converted log segment's records are written: one file per table,
// partition and bucket,
// <table>/created_date=<day>/b<k>of<n>-<source>-<seq>.parquet, each
// appearing whole or not at all. Readers, stats, manifests and Compact
// treat the files as any other run. Writing the same source and seq with
// the same records again writes the same files, so a writer that crashed
// before it could record that the run was written may simply repeat it
// (while the tables are published, see PublicationKey, a file already
// there is checked to hold as many rows and kept, and one a compaction
// folded in is not written again: nothing a snapshot names is written
// over); the seq must therefore never be reused for other records, and source
// must differ from every other writer's (a UUID, or a lower-case name of
// [0-9a-z_], at most 64 bytes). Records are checked as Append checks them
// (an invalid or foreign one fails the whole run before anything is
// written) but otherwise kept as given: processor, times and version are
// the writer's. It works on an outbox opened ReadOnly too, and there its
// first call puts each table's schema file in place, as Open does for a
// writer, so that a tree written only by runs answers the documented
// DuckDB queries of a table no run reached with no rows, not an error. A
// run of no records writes only those, the first time.
func (o *Outbox) WriteRun(ctx context.Context, source string, seq uint64, recs []outbox.Record) error {
	if o.closed.Load() {
		return ErrClosed
	}
	if !runSource.MatchString(source) {
		return fmt.Errorf("outbox: run source %q is not a UUID or a name of [0-9a-z_] (at most 64 bytes, not starting with _)", source)
	}
	if !o.schemaFiles.Load() {
		if err := o.writeSchemaFiles(ctx); err != nil {
			return err
		}
		o.schemaFiles.Store(true)
	}
	checked := make([]outbox.Record, len(recs))
	for i, r := range recs {
		if err := r.Prepare(r.ProcessorUUID, r.UpdatedAt); err != nil {
			return fmt.Errorf("outbox: run %s-%d: record %d (%s %s): %w", source, seq, i, r.Table, r.ID, err)
		}
		checked[i] = r
	}
	return o.writeSegmentParquet(ctx, source, seq, [][]outbox.Record{checked})
}
