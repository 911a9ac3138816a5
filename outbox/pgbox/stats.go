package pgbox

import (
	"context"
	"fmt"

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
}

// Stats summarizes every table, in the order of outbox.Tables. It reads
// every row, on the server: run it on a replica's connection when the
// tables are large (New on that pool), not on the dispatchers' primary.
func (o *Outbox) Stats(ctx context.Context) ([]TableStats, error) {
	out := make([]TableStats, 0, len(o.tables))
	for _, tb := range o.tables {
		st := TableStats{Table: tb.t, ByStatus: map[string]int64{}, ByQueue: map[string]int64{},
			ByKind: map[string]int64{}, ByProcessor: map[string]int64{}}
		err := o.db.QueryRowContext(ctx, `SELECT count(*), pg_total_relation_size('`+tb.name+`') FROM `+tb.name).Scan(&st.Rows, &st.Bytes)
		if err != nil {
			return nil, o.readError(tb, err)
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
