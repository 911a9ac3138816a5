package pgbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Latest returns the current state of an ID (its newest record by
// outbox.Newer); ok is false when the ID was never recorded.
func (o *Outbox) Latest(ctx context.Context, t outbox.Table, id string) (outbox.Record, bool, error) {
	tb, err := o.table(t)
	if err != nil {
		return outbox.Record{}, false, err
	}
	recs, err := o.query(ctx, tb, tb.byID, id)
	if err != nil || len(recs) == 0 {
		return outbox.Record{}, false, err
	}
	return newest(recs), true, nil
}

// newest returns the record of recs (one ID's, at least one) that no other
// is outbox.Newer than.
func newest(recs []outbox.Record) outbox.Record {
	latest := recs[0]
	for i := range recs[1:] {
		if outbox.Newer(&recs[i+1], &latest) {
			latest = recs[i+1]
		}
	}
	return latest
}

// Lookup returns the records matching q, arranged as outbox.Arrange does.
func (o *Outbox) Lookup(ctx context.Context, q outbox.Query) ([]outbox.Record, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []outbox.Record
	for _, tb := range o.tables {
		if q.Table != "" && tb.t != q.Table {
			continue
		}
		stmt, arg := tb.byID, q.ID
		switch {
		case q.CloudTaskID != "":
			stmt, arg = tb.byCloudTaskID, q.CloudTaskID
		case q.RunID != "":
			stmt, arg = tb.byRunID, q.RunID
		}
		recs, err := o.query(ctx, tb, stmt, arg)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	out = outbox.Arrange(out, q.History)
	if q.Summary {
		for i := range out {
			out[i] = out[i].Summary()
		}
	}
	return out, nil
}

// Pending returns the records of table t whose latest state is pending and
// was written more than olderThan ago (by Config.Clock), by any
// processor, oldest first, then by ID.
func (o *Outbox) Pending(ctx context.Context, t outbox.Table, olderThan time.Duration) ([]outbox.Record, error) {
	tb, err := o.table(t)
	if err != nil {
		return nil, err
	}
	recs, err := o.query(ctx, tb, tb.pending, o.clock.Now().Add(-olderThan))
	if err != nil {
		return nil, err
	}
	return sortPending(recs), nil
}

// sortPending orders recs as outbox.SortPending does and keeps one record
// per ID (two rows that tie in every way Newer looks at are one state).
func sortPending(recs []outbox.Record) []outbox.Record {
	outbox.SortPending(recs)
	seen := make(map[string]bool, len(recs))
	out := recs[:0]
	for _, r := range recs {
		if !seen[r.ID] {
			seen[r.ID] = true
			out = append(out, r)
		}
	}
	return out
}

// query runs a statement that returns tb's columns and scans its rows into
// records, leaving out those no dispatcher can have written.
func (o *Outbox) query(ctx context.Context, tb *table, stmt string, args ...any) ([]outbox.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, err := o.db.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, o.readError(tb, err)
	}
	defer rows.Close()
	return scanRecords(tb, rows, func(err error) error { return o.readError(tb, err) })
}

// recordRows are the rows of a statement that returns a table's columns,
// from a pool or from a caller's transaction.
type recordRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// scanRecords scans every row into records, leaving out those no
// dispatcher can have written. readErr wraps an error that ended the
// iteration, as the statement's own errors are wrapped.
func scanRecords(tb *table, rows recordRows, readErr func(error) error) ([]outbox.Record, error) {
	var out []outbox.Record
	for rows.Next() {
		r, err := scan(tb, rows)
		if err != nil {
			return nil, fmt.Errorf("pgbox: read %s: %w", tb.name, err)
		}
		if r.Trusted() {
			out = append(out, r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, readErr(err)
	}
	return out, nil
}

// readError wraps an error of a statement on tb, saying how to create the
// tables when they are missing.
func (o *Outbox) readError(tb *table, err error) error {
	if sqlState(err) == undefinedTable {
		return fmt.Errorf("pgbox: %s: %w", tb.name, errNotMigrated)
	}
	return fmt.Errorf("pgbox: read %s: %w", tb.name, err)
}

// scan reads one row of tb's columns from rows (*sql.Rows, or the
// outbox.Rows of a caller's transaction), and into extra the columns that
// follow them.
func scan(tb *table, rows interface{ Scan(dest ...any) error }, extra ...any) (outbox.Record, error) {
	r := outbox.Record{Table: tb.t}
	var status string
	var due sql.NullTime
	dest := []any{&r.ID, &r.Version, &r.CloudTaskID, &r.Queue, &r.RunID, &r.TaskKey, &r.Attempt, &r.Kind, &status, &r.ErrorCode,
		&r.CreateCalls, &r.PayloadSHA256, &r.ProcessorUUID, &r.CreatedAt, &r.UpdatedAt, &due}
	var latencyUS int64
	if tb.t == outbox.TableDeliveries {
		d := &r.Delivery
		dest = append(dest, &d.RetryCount, &d.ExecutionCount, &d.HTTPStatus, &latencyUS)
	}
	var traceID, spanID sql.NullString
	dest = append(dest, &traceID, &spanID)
	dest = append(dest, extra...)
	if err := rows.Scan(dest...); err != nil {
		return r, err
	}
	r.Status, r.DueAt, r.TraceID, r.SpanID = outbox.Status(status), due.Time, traceID.String, spanID.String
	r.Delivery.Latency = time.Duration(latencyUS) * time.Microsecond
	r.Normalize()
	return r, nil
}
