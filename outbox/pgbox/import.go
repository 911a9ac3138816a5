package pgbox

import (
	"context"
	"fmt"
	"strings"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// importBatch bounds the records one import statement inserts.
const importBatch = 500

// RecordSource is an outbox whose every record can be walked, table by
// table: a *parquetbox.Outbox (its Records method) is one.
type RecordSource interface {
	// Records calls fn with every record of table t, the whole history of
	// every ID; an error from fn stops the walk and is returned.
	Records(ctx context.Context, t outbox.Table, fn func(outbox.Record) error) error
}

// ImportStats counts what Import did with one table's records.
type ImportStats struct {
	// Table is the table.
	Table outbox.Table
	// Read counts the records the source gave.
	Read int64
	// Imported counts the records inserted.
	Imported int64
	// Skipped counts the records left out: held already (an earlier
	// import, or the source gave one twice), or whose Version another
	// record of the ID holds here (written by a dispatcher on this store
	// meanwhile: that record stands).
	Skipped int64
}

// Import copies every record of src into o's tables, all three, the whole
// history of every ID as it was written: versions, times and processors
// are kept, so a repeat of an old ID through this store is answered from
// its old records (already_existed, or a conflict for a changed payload)
// without a call to Cloud Tasks. It is idempotent: a record held already
// (the same ID, version, status, updated_at and processor) is skipped, so
// an import that stopped can run again, and one run after dispatchers
// started on this store skips a record whose Version they took. Records
// are inserted in batches of 500, each committed on its own.
func (o *Outbox) Import(ctx context.Context, src RecordSource) ([]ImportStats, error) {
	var out []ImportStats
	for _, tb := range o.tables {
		st := ImportStats{Table: tb.t}
		var batch []*outbox.Record
		seen := make(map[importKey]bool)
		flush := func() error {
			n, err := o.importRecords(ctx, tb, batch)
			st.Imported += n
			st.Skipped += int64(len(batch)) - n
			batch, seen = batch[:0], make(map[importKey]bool)
			return err
		}
		err := src.Records(ctx, tb.t, func(r outbox.Record) error {
			st.Read++
			k := importKey{r.ID, r.Version, r.Status, r.UpdatedAt.UnixMicro(), r.ProcessorUUID}
			if seen[k] {
				st.Skipped++
				return nil
			}
			seen[k] = true
			batch = append(batch, &r)
			if len(batch) == importBatch {
				return flush()
			}
			return nil
		})
		if err == nil && len(batch) > 0 {
			err = flush()
		}
		out = append(out, st)
		if err != nil {
			return out, fmt.Errorf("pgbox: import %s: %w", tb.t, err)
		}
	}
	return out, nil
}

// importKey names a record as Import tells records apart.
type importKey struct {
	id        string
	version   int64
	status    outbox.Status
	updatedAt int64
	processor string
}

// importRecords inserts those of recs that tb does not hold, as they are,
// and returns how many it inserted.
func (o *Outbox) importRecords(ctx context.Context, tb *table, recs []*outbox.Record) (int64, error) {
	arg, err := batchArg(recs, nil)
	if err != nil {
		return 0, err
	}
	res, err := o.db.ExecContext(ctx, o.importStatement(tb), arg)
	if sqlState(err) == undefinedTable {
		return 0, errNotMigrated
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// importStatement inserts the records of its JSON argument as they are,
// except those tb holds already and those whose Version another record
// of the ID holds.
func (o *Outbox) importStatement(tb *table) string {
	var values []string
	for _, c := range strings.Split(tb.cols, ",") {
		c = strings.TrimSpace(c)
		if c == tb.id {
			c = "id"
		}
		values = append(values, "i."+c)
	}
	return `INSERT INTO ` + tb.name + ` (` + tb.cols + `)
		SELECT ` + strings.Join(values, ", ") + ` FROM (` + recordset(tb) + `) i
		WHERE NOT EXISTS (SELECT 1 FROM ` + tb.name + ` t WHERE t.` + tb.id + ` = i.id AND t.version = i.version
			AND t.status = i.status AND t.updated_at = i.updated_at AND t.processor_uuid = i.processor_uuid)
		ORDER BY i.id
		ON CONFLICT (` + tb.id + `, version) WHERE version > 0 DO NOTHING`
}
