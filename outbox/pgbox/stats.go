package pgbox

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// TableStats summarizes one table.
type TableStats struct {
	// Table is the table.
	Table outbox.Table
	// Rows counts the table's rows: every recorded state Retain has kept.
	Rows int64
	// Bytes is the table's size on the server, indexes included
	// (pg_total_relation_size).
	Bytes int64
	// IDs counts distinct IDs.
	IDs int64
	// ByStatus, ByQueue, ByKind and ByProcessor count IDs by their latest
	// state's status, queue, kind and writing processor.
	ByStatus, ByQueue, ByKind, ByProcessor map[string]int64
	// Unexported counts the rows an Exporter has still to write to
	// Parquet (in no batch, or in a batch not yet written), once an
	// exporter has run on the database; Exporting says whether one has.
	Unexported int64
	Exporting  bool
	// Refused counts the rows exporters refused to write, which stay
	// until removed on purpose (see Outbox.Refused).
	Refused int64
}

// Stats summarizes every table, in the order of outbox.Tables. It reads
// every row, on the server: run it on a replica's connection when the
// tables are large (New on that pool), not on the dispatchers' primary.
func (o *Outbox) Stats(ctx context.Context) ([]TableStats, error) {
	et := exportTablesOf(o.opts)
	var exporting bool
	if err := o.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+et.source+`)`).Scan(&exporting); err != nil {
		return nil, o.readError(o.tables[0], err)
	}
	out := make([]TableStats, 0, len(o.tables))
	for _, tb := range o.tables {
		st := TableStats{Table: tb.t, ByStatus: map[string]int64{}, ByQueue: map[string]int64{},
			ByKind: map[string]int64{}, ByProcessor: map[string]int64{}, Exporting: exporting}
		err := o.db.QueryRowContext(ctx, `SELECT count(*), pg_total_relation_size('`+tb.name+`') FROM `+tb.name).Scan(&st.Rows, &st.Bytes)
		if err != nil {
			return nil, o.readError(tb, err)
		}
		if exporting {
			err := o.db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE u.export_batch IS DISTINCT FROM `+strconv.Itoa(refusedBatch)+`),
				count(*) FILTER (WHERE u.export_batch = `+strconv.Itoa(refusedBatch)+`)
				FROM `+tb.name+` u LEFT JOIN `+et.batches+` b ON b.batch = u.export_batch
				WHERE b.written_at IS NULL`).Scan(&st.Unexported, &st.Refused)
			if err != nil {
				return nil, o.readError(tb, err)
			}
		}
		rows, err := o.db.QueryContext(ctx, tb.stats)
		if err != nil {
			return nil, o.readError(tb, err)
		}
		for rows.Next() {
			var status, queue, kind, processor string
			var n int64
			if err := rows.Scan(&status, &queue, &kind, &processor, &n); err != nil {
				rows.Close()
				return nil, fmt.Errorf("pgbox: stats %s: %w", tb.name, err)
			}
			st.IDs += n
			st.ByStatus[status] += n
			st.ByQueue[queue] += n
			st.ByKind[kind] += n
			st.ByProcessor[processor] += n
		}
		if err := rows.Close(); err != nil {
			return nil, o.readError(tb, err)
		}
		if err := rows.Err(); err != nil {
			return nil, o.readError(tb, err)
		}
		out = append(out, st)
	}
	return out, nil
}
