package pgbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// meterName is the instrumentation scope of this package's metrics.
const meterName = "github.com/ctdispatch/ctdispatch/outbox/pgbox"

// MetricExportRefused is the counter of rows an exporter refused to write
// to Parquet, labelled by table (dispatch_outbox, timers, deliveries).
// Anything above zero means rows no dispatcher can have written are in
// the tables: list them with Outbox.Refused.
const MetricExportRefused = "ctdispatch.export.refused_rows"

// refusedBatch is the export_batch of a row the exporter will not write.
// No batch has number 0 (they count from 1), so the row is in no written
// batch, and Retain keeps its ID as it keeps any unexported one; and it is
// not NULL, so no claim takes the row again.
const refusedBatch = 0

// maxRefusedSample bounds the refused rows a pass reports and a warning
// names: a report, not a listing.
const maxRefusedSample = 5

// removeRefusedBatch bounds the rows one statement of DeleteRefused or
// QuarantineRefused removes.
const removeRefusedBatch = 1000

// RefusedRow is a row an exporter refused to write to Parquet: one that
// Record.Distrust finds no dispatcher can have written (a cloud_task_id
// that is not its ID's hash, an ID that is not an internal ID, a status
// this release does not know: a row typed in by hand, written by another
// tool or damaged). Readers of the outbox already leave such rows out;
// the exporter leaves them in the database, in no batch, so that Retain
// never deletes them as exported.
type RefusedRow struct {
	// Table is the row's table.
	Table outbox.Table
	// Seq is the row's seq column: it tells two rows of one ID apart.
	Seq int64
	// ID is the row's ID column, as it is.
	ID string
	// Reason says why the row was refused (Record.Distrust).
	Reason string
}

// String gives the row on one line: table, seq, ID and reason.
func (r RefusedRow) String() string {
	return fmt.Sprintf("%s seq %d %s: %s", r.Table, r.Seq, strconv.Quote(r.ID), r.Reason)
}

// QuarantineTableName returns the quoted name (schema.table) of the
// table QuarantineRefused moves refused rows to, for the tables opts name.
func QuarantineTableName(opts Config) string {
	opts = opts.withDefaults()
	return `"` + opts.Schema + `"."` + opts.TablePrefix + `export_quarantine"`
}

// quarantineDDL creates the table QuarantineRefused moves rows to: each
// row whole, as JSON, with where it came from and why it was refused.
func (o *Outbox) quarantineDDL() []string {
	q := QuarantineTableName(o.opts)
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + q + ` (
			from_table     text COLLATE "C" NOT NULL,
			seq            bigint NOT NULL,
			id             text COLLATE "C" NOT NULL,
			reason         text NOT NULL,
			row_data       jsonb NOT NULL,
			quarantined_at timestamptz NOT NULL,
			PRIMARY KEY (from_table, seq)
		)`,
		`COMMENT ON TABLE ` + q + ` IS 'ctdispatch outbox export: rows the exporter refused to write, moved here by "ctdispatch export refused --quarantine" (github.com/ctdispatch/ctdispatch/outbox/pgbox)'`,
	}
}

// Refused returns how many rows of each table (in the order of
// outbox.Tables) exporters refused to write to Parquet, and the first
// limit of them, by table and then seq, each with the reason. They stay
// in the tables, and Retain keeps their IDs, until DeleteRefused or
// QuarantineRefused removes them. A row no exporter has looked at yet
// is not counted: run an export first.
func (o *Outbox) Refused(ctx context.Context, limit int) ([3]int64, []RefusedRow, error) {
	var counts [3]int64
	var rows []RefusedRow
	for i, tb := range o.tables {
		if err := o.db.QueryRowContext(ctx, `SELECT count(*) FROM `+tb.name+` WHERE export_batch = `+strconv.Itoa(refusedBatch)).Scan(&counts[i]); err != nil {
			return counts, nil, o.readError(tb, err)
		}
		if counts[i] == 0 || len(rows) >= limit {
			continue
		}
		got, err := o.refusedRows(ctx, o.db, tb, limit-len(rows), "")
		if err != nil {
			return counts, nil, err
		}
		rows = append(rows, got...)
	}
	return counts, rows, nil
}

// queryer is a pool or a transaction.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// refusedRows reads the first n refused rows of tb, by seq, with the
// reason each was refused; lock is appended to the statement.
func (o *Outbox) refusedRows(ctx context.Context, q queryer, tb *table, n int, lock string) ([]RefusedRow, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+tb.cols+`, seq FROM `+tb.name+` WHERE export_batch = `+strconv.Itoa(refusedBatch)+`
		ORDER BY seq LIMIT `+strconv.Itoa(n)+lock)
	if err != nil {
		return nil, o.readError(tb, err)
	}
	defer rows.Close()
	var out []RefusedRow
	for rows.Next() {
		var seq int64
		r, err := scan(tb, rows, &seq)
		if err != nil {
			return nil, fmt.Errorf("pgbox: read %s: %w", tb.name, err)
		}
		why := r.Distrust()
		if why == "" {
			// Refused by a release that knew less (a status added since):
			// still out of every batch, and removed with the others.
			why = "refused by an earlier exporter; this release would export it"
		}
		out = append(out, RefusedRow{Table: tb.t, Seq: seq, ID: r.ID, Reason: why})
	}
	if err := rows.Err(); err != nil {
		return nil, o.readError(tb, err)
	}
	return out, nil
}

// DeleteRefused deletes every row exporters refused to write (see
// Refused), in statements of at most 1,000 rows, and returns how many
// went from each table. Other rows of the same IDs stay.
func (o *Outbox) DeleteRefused(ctx context.Context) ([3]int64, error) {
	var deleted [3]int64
	for i, tb := range o.tables {
		for {
			res, err := o.db.ExecContext(ctx, `DELETE FROM `+tb.name+` WHERE seq IN (
				SELECT seq FROM `+tb.name+` WHERE export_batch = `+strconv.Itoa(refusedBatch)+` LIMIT `+strconv.Itoa(removeRefusedBatch)+`)`)
			if err != nil {
				return deleted, fmt.Errorf("pgbox: delete refused rows of %s: %w", tb.name, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return deleted, fmt.Errorf("pgbox: delete refused rows of %s: %w", tb.name, err)
			}
			deleted[i] += n
			if n == 0 {
				break
			}
		}
	}
	return deleted, nil
}

// QuarantineRefused moves every row exporters refused to write (see
// Refused) into the quarantine table (QuarantineTableName; Migrate
// creates it), each whole as JSON with its table, seq, ID and reason,
// and returns how many moved from each table. Each statement's rows move
// in one transaction of at most 1,000 rows, so a row is never in both
// tables nor in neither.
func (o *Outbox) QuarantineRefused(ctx context.Context) ([3]int64, error) {
	var moved [3]int64
	for i, tb := range o.tables {
		for {
			n, err := o.quarantineSome(ctx, tb)
			if err != nil {
				return moved, fmt.Errorf("pgbox: quarantine refused rows of %s: %w", tb.name, err)
			}
			moved[i] += n
			if n == 0 {
				break
			}
		}
	}
	return moved, nil
}

// quarantineSome moves up to removeRefusedBatch refused rows of tb in one
// transaction, and returns how many.
func (o *Outbox) quarantineSome(ctx context.Context, tb *table) (int64, error) {
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	// Locked, so that two quarantines at once move different rows.
	some, err := o.refusedRows(ctx, tx, tb, removeRefusedBatch, " FOR UPDATE SKIP LOCKED")
	if err != nil || len(some) == 0 {
		return 0, err
	}
	type reason struct {
		Seq    int64  `json:"seq"`
		Reason string `json:"reason"`
	}
	reasons := make([]reason, len(some))
	for i, r := range some {
		reasons[i] = reason{r.Seq, r.Reason}
	}
	list, err := json.Marshal(reasons)
	if err != nil {
		return 0, err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO `+QuarantineTableName(o.opts)+` (from_table, seq, id, reason, row_data, quarantined_at)
		SELECT $1, t.seq, t.`+tb.id+`, r.reason, to_jsonb(t), $3
		FROM `+tb.name+` t JOIN jsonb_to_recordset($2::jsonb) AS r(seq bigint, reason text) ON r.seq = t.seq
		WHERE t.export_batch = `+strconv.Itoa(refusedBatch), string(tb.t), string(list), o.clock.Now())
	if sqlState(err) == undefinedTable {
		return 0, fmt.Errorf("%s does not exist; create it with \"ctdispatch migrate --outbox postgres://…\" or pgbox.Migrate (idempotent): %w", QuarantineTableName(o.opts), err)
	}
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM `+tb.name+` t USING jsonb_to_recordset($1::jsonb) AS r(seq bigint, reason text)
		WHERE t.seq = r.seq AND t.export_batch = `+strconv.Itoa(refusedBatch), string(list))
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	return n, tx.Commit()
}
