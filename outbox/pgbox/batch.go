package pgbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// maxBatch bounds the records one batch statement inserts, so a statement
// stays short and its JSON argument small.
const maxBatch = 256

// deadlockRetries bounds how often a batch statement the server aborted to
// break a deadlock is run again. Rows are inserted in ID order, so two
// batches of this package cannot deadlock each other; the retry covers
// other writers.
const deadlockRetries = 3

// deadlockDetected is the SQLSTATE of a statement aborted to break a
// deadlock: nothing of it was kept, so it can run again.
const deadlockDetected = "40P01"

// maxInFlight bounds the batch statements on their way at once, each on a
// connection of its own.
const maxInFlight = 4

// writer groups the appends of concurrent callers (group commit): while
// batch statements are on their way, the appends that arrive queue, and
// the next statement inserts them all, one statement and one commit per
// table for the lot. Each record keeps its own condition. Batches are
// taken in the order the appends were queued, and an ID is in at most one
// batch on its way at a time (a later record of it waits for the next), so
// a processor's records of an ID are kept in the order Append was called.
type writer struct {
	mu       sync.Mutex
	queue    []*write
	running  int               // drain goroutines
	inFlight map[writeKey]bool // IDs in a batch on its way
}

// writeKey names an ID in its table.
type writeKey struct {
	t  outbox.Table
	id string
}

// write is one queued append and, once done is closed, its result.
type write struct {
	tb    *table
	rec   *outbox.Record
	first bool           // refused if the ID has any record (Reserve)
	drop  *outbox.Intent // dropped by the same statement (AppendOutcome)
	done  chan struct{}

	kept    bool
	current []outbox.Record // the ID's rows, when refused
	err     error
}

// write queues r for the next batch and waits for its result. A ctx that
// ends first is an error that cannot say whether r is kept.
func (o *Outbox) write(ctx context.Context, tb *table, r *outbox.Record, first bool, drop *outbox.Intent) (*write, error) {
	w := &write{tb: tb, rec: r, first: first, drop: drop, done: make(chan struct{})}
	o.w.mu.Lock()
	o.w.queue = append(o.w.queue, w)
	start := o.w.running < maxInFlight
	if start {
		o.w.running++
	}
	o.w.mu.Unlock()
	if start {
		go o.drain()
	}
	select {
	case <-w.done:
		return w, w.err
	case <-ctx.Done():
		return nil, fmt.Errorf("pgbox: append %s %s: %w before its batch committed; the record may still be kept: read Latest (%w)", r.Table, r.ID, ctx.Err(), outbox.ErrKeptUnknown)
	}
}

// drain runs batches until the queue is empty. It runs on a goroutine of
// its own, so no caller waits on others' records beyond its own batch.
func (o *Outbox) drain() {
	for {
		batch := o.take()
		if batch == nil {
			return
		}
		o.runBatch(batch)
		o.w.mu.Lock()
		for _, w := range batch {
			delete(o.w.inFlight, writeKey{w.tb.t, w.rec.ID})
		}
		o.w.mu.Unlock()
	}
}

// take removes the next batch from the queue: the oldest records, at most
// maxBatch, at most one per table and ID, and none of an ID in a batch on
// its way. With none to take it ends the caller's drain and returns nil.
func (o *Outbox) take() []*write {
	o.w.mu.Lock()
	defer o.w.mu.Unlock()
	if o.w.inFlight == nil {
		o.w.inFlight = make(map[writeKey]bool)
	}
	var batch, rest []*write
	for _, w := range o.w.queue {
		k := writeKey{w.tb.t, w.rec.ID}
		if o.w.inFlight[k] || len(batch) == maxBatch {
			rest = append(rest, w)
			continue
		}
		o.w.inFlight[k] = true
		batch = append(batch, w)
	}
	o.w.queue = rest
	if len(batch) == 0 {
		o.w.running--
		return nil
	}
	return batch
}

// runBatch inserts a batch, one statement per table it touches, and hands
// each write its result. The statements run without a caller's context:
// a caller that stops waiting does not cancel the others' records.
func (o *Outbox) runBatch(batch []*write) {
	for _, tb := range o.tables {
		var ws []*write
		for _, w := range batch {
			if w.tb == tb {
				ws = append(ws, w)
			}
		}
		if len(ws) == 0 {
			continue
		}
		var err error
		for range deadlockRetries {
			if err = o.insertBatch(context.Background(), tb, ws); sqlState(err) != deadlockDetected {
				break
			}
		}
		for _, w := range ws {
			if err != nil {
				w.err = o.appendError(w.rec, err)
			}
			close(w.done)
		}
	}
}

// appendError wraps a batch statement's error for one of its records.
func (o *Outbox) appendError(r *outbox.Record, err error) error {
	if sqlState(err) == undefinedTable {
		err = errNotMigrated
	}
	return fmt.Errorf("pgbox: append %s %s: %w", r.Table, r.ID, err)
}

// insertBatch runs tb's batch statement over ws and sets each one's kept
// and, when refused, the rows of its ID the statement saw. An error after
// the statement was sent matches outbox.ErrKeptUnknown when the
// statement may have committed (sentStatementError).
func (o *Outbox) insertBatch(ctx context.Context, tb *table, ws []*write) error {
	recs := make([]*outbox.Record, len(ws))
	var first []bool
	for i, w := range ws {
		recs[i] = w.rec
		first = append(first, w.first)
	}
	arg, err := batchArg(recs, first)
	if err != nil {
		return err
	}
	byID := make(map[string]*write, len(ws))
	var drops []dropRow
	for _, w := range ws {
		w.kept, w.current = false, nil
		byID[w.rec.ID] = w
		if w.drop != nil {
			drops = append(drops, dropRow{ID: w.drop.ID, Version: w.drop.Version, Op: opOf(*w.drop)})
		}
	}
	stmt, args := o.batchStmt[tb.t], []any{arg}
	if len(drops) > 0 {
		b, err := json.Marshal(drops)
		if err != nil {
			return err
		}
		stmt, args = o.batchDropStmt[tb.t], append(args, string(b), o.processor)
	}
	rows, err := o.db.QueryContext(ctx, stmt, args...)
	if err != nil {
		return sentStatementError(err)
	}
	defer rows.Close()
	for rows.Next() {
		var inserted bool
		r, err := scan(tb, rows, &inserted)
		if err != nil {
			return sentStatementError(fmt.Errorf("read %s: %w", tb.name, err))
		}
		w := byID[r.ID]
		switch {
		case w == nil:
			return sentStatementError(fmt.Errorf("batch statement on %s returned ID %q, which it was not given", tb.name, r.ID))
		case inserted:
			w.kept = true
		case r.Trusted():
			w.current = append(w.current, r)
		}
	}
	return sentStatementError(rows.Err())
}

// batchRow is one record as the batch statement's JSON argument carries
// it, under the names of jsonb_to_recordset's column list.
type batchRow struct {
	ID             string  `json:"id"`
	Version        int64   `json:"version"`
	CloudTaskID    string  `json:"cloud_task_id"`
	Queue          string  `json:"queue"`
	RunID          string  `json:"run_id"`
	TaskKey        string  `json:"task_key"`
	Attempt        string  `json:"attempt"`
	Kind           string  `json:"kind"`
	Status         string  `json:"status"`
	ErrorCode      string  `json:"error_code"`
	CreateCalls    int32   `json:"create_calls"`
	PayloadSHA256  string  `json:"payload_sha256"`
	ProcessorUUID  string  `json:"processor_uuid"`
	CreatedAt      string  `json:"created_at"`
	UpdatedAt      string  `json:"updated_at"`
	DueAt          *string `json:"due_at"`
	RetryCount     int32   `json:"retry_count"`
	ExecutionCount int32   `json:"execution_count"`
	HTTPStatus     int32   `json:"http_status"`
	LatencyUS      int64   `json:"latency_us"`
	TraceID        *string `json:"trace_id"`
	SpanID         *string `json:"span_id"`
	First          bool    `json:"first"`
}

// dropRow is one intent a batch statement drops, as its second JSON
// argument carries it.
type dropRow struct {
	ID      string `json:"id"`
	Version int64  `json:"version"`
	Op      string `json:"op"`
}

// batchArg encodes recs as a batch statement's argument, each marked
// first as first (nil: none) says.
func batchArg(recs []*outbox.Record, first []bool) (string, error) {
	b, err := json.Marshal(batchRows(recs, first))
	return string(b), err
}

// batchRows returns recs as a batch statement's argument carries them.
func batchRows(recs []*outbox.Record, first []bool) []batchRow {
	rows := make([]batchRow, len(recs))
	for i, r := range recs {
		rows[i] = batchRow{ID: r.ID, Version: r.Version, CloudTaskID: r.CloudTaskID, Queue: r.Queue, RunID: r.RunID, TaskKey: r.TaskKey,
			Attempt: r.Attempt, Kind: r.Kind, Status: string(r.Status), ErrorCode: r.ErrorCode, CreateCalls: r.CreateCalls,
			PayloadSHA256: r.PayloadSHA256, ProcessorUUID: r.ProcessorUUID, CreatedAt: timestamp(r.CreatedAt), UpdatedAt: timestamp(r.UpdatedAt),
			RetryCount: r.Delivery.RetryCount, ExecutionCount: r.Delivery.ExecutionCount, HTTPStatus: r.Delivery.HTTPStatus,
			LatencyUS: r.Delivery.Latency.Microseconds(), TraceID: nonEmpty(r.TraceID), SpanID: nonEmpty(r.SpanID)}
		if first != nil {
			rows[i].First = first[i]
		}
		if !r.DueAt.IsZero() {
			due := timestamp(r.DueAt)
			rows[i].DueAt = &due
		}
	}
	return rows
}

// timestamp is t as PostgreSQL reads a timestamptz, to the microsecond
// the records keep.
func timestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// batchStatement returns tb's batch statement. It takes the records as one
// JSON array ($1), inserts each one whose condition holds (Version 0, or
// no row of its ID with that Version or a higher one; the unique index
// settles two writers of one version), in ID order, with updated_at
// nudged past the ID's latest as a single append does, and returns the
// inserted rows marked true and, for each record refused, the rows of its
// ID marked false: the winner comes back in the same round trip. A record
// marked first (Reserve) is refused when its ID has any row. drops, when
// not empty, are more WITH queries that run once the inserts are done
// (batchDrops).
func batchStatement(tb *table, drops string) string {
	returned, values := insertColumns(tb)
	current := make([]string, len(returned))
	for i, c := range returned {
		current[i] = "t." + c
	}
	return `WITH i AS (` + recordset(tb) + `),
		ins AS (INSERT INTO ` + tb.name + ` (` + strings.Join(returned, ", ") + `)
			SELECT ` + strings.Join(values, ", ") + ` FROM i
			WHERE i.version = 0 OR NOT EXISTS (SELECT 1 FROM ` + tb.name + ` t WHERE t.` + tb.id + ` = i.id AND (t.version >= i.version OR i.first))
			ORDER BY i.id
			ON CONFLICT (` + tb.id + `, version) WHERE version > 0 DO NOTHING
			RETURNING ` + strings.Join(returned, ", ") + `)` + drops + `
		SELECT ` + strings.Join(returned, ", ") + `, true FROM ins
		UNION ALL
		SELECT ` + strings.Join(current, ", ") + `, false FROM i JOIN ` + tb.name + ` t ON t.` + tb.id + ` = i.id
			WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.` + tb.id + ` = i.id)`
}

// insertColumns returns tb's columns and the values a batch statement
// inserts into them from its recordset's row i: the row's own, with
// updated_at nudged past the ID's latest as a single append does.
func insertColumns(tb *table) (cols, values []string) {
	for _, c := range strings.Split(tb.cols, ",") {
		c = strings.TrimSpace(c)
		name := c
		if c == tb.id {
			name = "id"
		}
		v := "i." + name
		if c == "updated_at" {
			v = `GREATEST(i.updated_at, (SELECT max(t.updated_at) FROM ` + tb.name + ` t WHERE t.` + tb.id + ` = i.id) + interval '1 microsecond')`
		}
		cols, values = append(cols, c), append(values, v)
	}
	return cols, values
}

// batchDrops returns the WITH queries by which a batch statement of a
// table with intents also drops the intents its second argument ($2, a
// JSON array of dropRows) names, as DropIntent does: each is deleted
// unless a later transaction replaced it (another version or op), and
// then this processor's claim ($3) on the replacement is released, with
// a notification of intents (unless the outbox sends none). They read
// ins first, so every record row is locked before any intent row, in
// the order a DispatchTx takes them.
func batchDrops(in intents) string {
	released := "1"
	if in.channel != "" {
		released = `pg_notify('` + in.channel + `', '` + outbox.NoticeIntents + `')`
	}
	return `,
		d AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS d(id text, version bigint, op text)),
		dropped AS (DELETE FROM ` + in.name + ` x USING d
			WHERE x.id = d.id AND x.version = d.version AND x.op = d.op AND (SELECT count(*) FROM ins) >= 0
			RETURNING x.id),
		released AS (UPDATE ` + in.name + ` x SET claimed_by = NULL, claim_expires = NULL FROM d
			WHERE x.id = d.id AND x.claimed_by = $3 AND NOT EXISTS (SELECT 1 FROM dropped WHERE dropped.id = d.id)
			RETURNING ` + released + `)`
}

// recordset is the query that reads a batch statement's JSON argument
// ($1) as rows of tb's columns, the ID's named id.
func recordset(tb *table) string {
	return recordsetOf(tb, "jsonb", "first boolean")
}

// recordsetOf is recordset read as kind (json or jsonb), with the extra
// columns that follow tb's. AppendIntents's argument is json: jsonb keeps
// no value above 256 MB, and a batch of requests may be larger.
func recordsetOf(tb *table, kind, extra string) string {
	var list []string
	for _, c := range strings.Split(tb.cols, ",") {
		name := strings.TrimSpace(c)
		if name == tb.id {
			name = "id"
		}
		list = append(list, name+" "+columnTypes[name])
	}
	return `SELECT * FROM ` + kind + `_to_recordset($1::` + kind + `) AS x(` + strings.Join(list, ", ") + `, ` + extra + `)`
}

// columnTypes are the SQL types of the columns a batch row carries.
var columnTypes = map[string]string{
	"id": "text", "version": "bigint", "cloud_task_id": "text", "queue": "text", "run_id": "text", "task_key": "text",
	"attempt": "text", "kind": "text", "status": "text", "error_code": "text", "create_calls": "integer",
	"payload_sha256": "text", "processor_uuid": "text", "created_at": "timestamptz", "updated_at": "timestamptz",
	"due_at": "timestamptz", "retry_count": "integer", "execution_count": "integer", "http_status": "integer",
	"latency_us": "bigint", "trace_id": "text", "span_id": "text",
}

// refused returns the conflict for r, refused with the rows current of
// its ID in hand. When they hold no row that refuses r, the winner
// committed after the statement's snapshot was taken (the unique index
// made the statement wait for it), and the ID is read again.
func (o *Outbox) refused(ctx context.Context, r *outbox.Record, current []outbox.Record) error {
	if len(current) == 0 {
		return o.conflict(ctx, r)
	}
	cur := newest(current)
	if cur.Version < r.Version {
		return o.conflict(ctx, r)
	}
	return &outbox.VersionConflictError{Table: r.Table, ID: r.ID, Version: r.Version, Current: cur}
}

var _ outbox.Reserver = (*Outbox)(nil)

// Reserve implements outbox.Reserver: it appends r, an ID's first record
// (Version 1), as Append does, in the same batch statement, unless the ID
// has any record (one of Version 0 too), and then returns the ID's newest
// record, which that statement returned (so a refusal costs no second
// round trip, except when the winner committed after the statement began
// and is read again).
func (o *Outbox) Reserve(ctx context.Context, r outbox.Record) (outbox.Record, bool, error) {
	if r.Version != 1 {
		return outbox.Record{}, false, &outbox.RecordError{ID: r.ID, Field: "Version", Value: fmt.Sprint(r.Version), Rule: "must be 1: Reserve writes an ID's first record"}
	}
	err := o.appendRecord(ctx, r, nil, true, nil)
	var vc *outbox.VersionConflictError
	if errors.As(err, &vc) {
		return vc.Current, false, nil
	}
	if err != nil {
		return outbox.Record{}, false, err
	}
	return outbox.Record{}, true, nil
}
