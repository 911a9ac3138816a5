package pgbox

import (
	"context"
	"fmt"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// retainBatch bounds the IDs one DELETE of Retain removes, so retention
// never holds one long transaction or a long lock on many rows.
const retainBatch = 1000

// RetainStats counts what Retain deleted, per table.
type RetainStats struct {
	// Table is the table.
	Table outbox.Table
	// Rows is how many rows (states) went.
	Rows int64
}

// Retain deletes the whole history of every ID whose latest state is
// terminal (not pending) and was written more than olderThan ago (by
// Config.Clock), in every table, in batches of at most 1,000 IDs per
// statement, and returns how many rows went from each table. An ID still
// pending is never deleted, however old: Recover needs it. A repeat of a
// deleted ID is answered as if it were new (Cloud Tasks answers
// AlreadyExists while it still holds the name), so keep records at least
// as long as callers may repeat a dispatch. Once an Exporter has run on
// the database (the prefix's export table holds its row), an ID with a
// state not yet exported (in no batch, or in a batch whose files are not
// written) is kept too, until an export has written it; delete that row
// to stop exporting and keeping. olderThan must be positive.
func (o *Outbox) Retain(ctx context.Context, olderThan time.Duration) ([]RetainStats, error) {
	if olderThan <= 0 {
		return nil, &ConfigError{Field: "olderThan", Value: olderThan.String(), Rule: "must be positive: it would delete the current state of every finished ID"}
	}
	cutoff := o.clock.Now().Add(-olderThan)
	stats := make([]RetainStats, 0, len(o.tables))
	for _, tb := range o.tables {
		st := RetainStats{Table: tb.t}
		for {
			if err := ctx.Err(); err != nil {
				return append(stats, st), err
			}
			res, err := o.db.ExecContext(ctx, tb.retain, cutoff)
			if sqlState(err) == undefinedTable {
				err = errNotMigrated
			}
			if err != nil {
				return append(stats, st), fmt.Errorf("pgbox: retain %s: %w", tb.name, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return append(stats, st), fmt.Errorf("pgbox: retain %s: %w", tb.name, err)
			}
			st.Rows += n
			if n == 0 {
				break
			}
		}
		stats = append(stats, st)
	}
	return stats, nil
}
