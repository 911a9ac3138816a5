package pgbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ctdispatch/ctdispatch/outbox"
)

var _ outbox.BulkIntents = (*Outbox)(nil)

// maxBulkArg bounds the arguments of one AppendIntents statement (the
// records' JSON and the requests' bytes): PostgreSQL takes no value
// longer than 1 GB, and a batch near that would hold the server's memory
// for the whole statement anyway.
const maxBulkArg = 512 << 20

// bulkStatements are the statements of outbox.BulkIntents on one table.
type bulkStatements struct {
	// latest reads every row of the IDs its JSON array ($1) names.
	latest string
	// appendIntents appends the records of its arguments with their
	// intents, and returns the IDs it refused; appendNotify does
	// the same and notifies (appendIntentsStatement). Both are empty for
	// the deliveries table, which has no intents.
	appendIntents, appendNotify string
}

func newBulkStatements(tb *table, in intents) bulkStatements {
	// One probe of the ID's index per ID, whatever the planner thinks of
	// the table's size: OFFSET 0 keeps the lateral subquery from being
	// flattened into a join, which a plan made (and cached) while the
	// table was small runs as a scan of the whole table however large it
	// has grown since.
	var cols []string
	for _, c := range strings.Split(tb.cols, ",") {
		cols = append(cols, "r."+strings.TrimSpace(c))
	}
	s := bulkStatements{latest: `SELECT ` + strings.Join(cols, ", ") + ` FROM json_array_elements_text($1::json) AS k(id)
		CROSS JOIN LATERAL (SELECT * FROM ` + tb.name + ` t WHERE t.` + tb.id + ` = k.id OFFSET 0) r`}
	if tb.claims {
		s.appendIntents = appendIntentsStatement(tb, in, false)
		s.appendNotify = appendIntentsStatement(tb, in, true)
	}
	return s
}

// appendIntentsStatement returns the statement of AppendIntents on tb:
// from its arguments (intentRecordset: the records as JSON in $1, their
// requests as bytes in $2), the records whose condition holds (no row
// of the ID with their Version or a higher one; the unique index settles
// two writers of one version) are inserted as Append inserts them, in ID
// order, and each one inserted gets its intent, upserted as AppendIntent
// upserts it; the statement returns the IDs it refused. The condition is
// a scalar subquery, one probe of the (ID, version) index per record: as
// NOT EXISTS the planner may hash the whole table instead, which costs
// more as the table grows (every Version here is 1 or above, so version 0
// rows never refuse). When notify, it
// also sends NoticeIntents once if it upserted any intent (PostgreSQL
// sends one notification per channel and payload per transaction). All of
// it is one statement, so one round trip whatever the batch's size.
func appendIntentsStatement(tb *table, in intents, notify bool) string {
	cols, values := insertColumns(tb)
	stmt := `WITH i AS (` + intentRecordset(tb) + `),
		ins AS (INSERT INTO ` + tb.name + ` (` + strings.Join(cols, ", ") + `)
			SELECT ` + strings.Join(values, ", ") + ` FROM i
			WHERE COALESCE((SELECT max(t.version) FROM ` + tb.name + ` t WHERE t.` + tb.id + ` = i.id AND t.version > 0), 0) < i.version
			ORDER BY i.id
			ON CONFLICT (` + tb.id + `, version) WHERE version > 0 DO NOTHING
			RETURNING ` + tb.id + `),
		w AS (INSERT INTO ` + in.name + ` (id, record_table, version, queue, task_name, schedule_time, request, created_at, op)
			SELECT i.id, '` + string(tb.t) + `', i.version, i.queue, i.task_name, i.due_at, i.request, i.updated_at, '` + opCreate + `'
			FROM i JOIN ins ON ins.` + tb.id + ` = i.id
			ORDER BY i.id
			ON CONFLICT (id) DO UPDATE SET ` + intentUpdate + `
			RETURNING 1)`
	refused := `SELECT i.id FROM i WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.` + tb.id + ` = i.id)`
	if !notify || in.channel == "" {
		// w runs to completion whether or not the query reads it.
		return stmt + `
		` + refused
	}
	// A CTE that calls a volatile function is evaluated once, where the
	// query reads it: n's one row (a NULL ID) says that it notified.
	return stmt + `,
		n AS (SELECT pg_notify('` + in.channel + `', '` + outbox.NoticeIntents + `') WHERE EXISTS (SELECT 1 FROM w))
		` + refused + `
		UNION ALL SELECT NULL FROM n`
}

// LatestManyTx implements outbox.BulkIntents: in one statement inside tx
// it reads every row of ids, and returns each ID's newest.
func (o *Outbox) LatestManyTx(ctx context.Context, tx outbox.Tx, t outbox.Table, ids []string) (map[string]outbox.Record, error) {
	tb, err := o.table(t)
	if err != nil {
		return nil, err
	}
	out := make(map[string]outbox.Record, len(ids))
	if len(ids) == 0 {
		return out, ctx.Err()
	}
	arg, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	recs, err := queryTx(ctx, tx, tb, o.bulk[t].latest, string(arg))
	if err != nil {
		return nil, err
	}
	byID := make(map[string][]outbox.Record, len(ids))
	for _, r := range recs {
		byID[r.ID] = append(byID[r.ID], r)
	}
	for id, recs := range byID {
		out[id] = newest(recs)
	}
	return out, nil
}

// intentRow is one record and its intent as the AppendIntents
// statement's JSON argument carries them.
type intentRow struct {
	batchRow
	TaskName string `json:"task_name"`
}

// intentRecordset is the query that reads the AppendIntents statement's
// arguments as rows of tb's columns (the ID's named id), the task's name
// and its request: the records from the JSON array $1, and each one's
// request from the bytea array $2 at the same place, sent as bytes
// rather than as base64 inside the JSON, which the server would parse
// and decode.
func intentRecordset(tb *table) string {
	var defs, names []string
	for _, c := range strings.Split(tb.cols, ",") {
		name := strings.TrimSpace(c)
		if name == tb.id {
			name = "id"
		}
		defs, names = append(defs, name+" "+columnTypes[name]), append(names, name)
	}
	defs, names = append(defs, "task_name text"), append(names, "task_name", "n")
	return `SELECT x.*, ($2::bytea[])[x.n] AS request
		FROM ROWS FROM (json_to_recordset($1::json) AS (` + strings.Join(defs, ", ") + `)) WITH ORDINALITY AS x(` + strings.Join(names, ", ") + `)`
}

// AppendIntents implements outbox.BulkIntents: after outbox.PrepareIntents
// has checked the batch, one statement inside tx inserts each record (a
// pending record, conditional on its Version as Append is) with its
// intent, replacing an unfinished intent of the same ID, and leaves out
// those whose Version an ID holds already, whose conflicts it returns
// after reading their IDs again in tx (one statement more, only then).
// The statement notifies as AppendIntent's
// does: at most once per Config.NotifyGap.
func (o *Outbox) AppendIntents(ctx context.Context, tx outbox.Tx, rs []outbox.Record, ins []outbox.Intent) ([]*outbox.VersionConflictError, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rs, err := outbox.PrepareIntents(rs, ins, o.processor, o.clock.Now())
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	t := rs[0].Table // PrepareIntents checked that all are of it
	tb, err := o.table(t)
	if err != nil {
		return nil, err
	}
	arg, requests, err := intentsArg(rs, ins)
	if err != nil {
		return nil, err
	}
	stmt := o.bulk[t].appendIntents
	if o.intents.notifyTurn() {
		stmt = o.bulk[t].appendNotify
	}
	refusedIDs, err := o.appendIntentRows(ctx, tx, tb, stmt, arg, requests)
	if err != nil || len(refusedIDs) == 0 {
		return nil, err
	}
	current, err := o.LatestManyTx(ctx, tx, t, refusedIDs)
	if err != nil {
		return nil, fmt.Errorf("pgbox: append %d intents to %s: %d refused; reading the winners: %w", len(rs), tb.name, len(refusedIDs), err)
	}
	wasRefused := make(map[string]bool, len(refusedIDs))
	for _, id := range refusedIDs {
		wasRefused[id] = true
	}
	var refused []*outbox.VersionConflictError
	for _, r := range rs {
		if !wasRefused[r.ID] {
			continue
		}
		cur, ok := current[r.ID]
		if !ok {
			return nil, fmt.Errorf("pgbox: append %s %s: version %d refused, but no record of the ID is left to read", r.Table, r.ID, r.Version)
		}
		refused = append(refused, &outbox.VersionConflictError{Table: r.Table, ID: r.ID, Version: r.Version, Current: cur})
	}
	return refused, nil
}

// appendIntentRows runs stmt, an AppendIntents statement, over arg and
// requests in tx and returns the IDs it refused.
func (o *Outbox) appendIntentRows(ctx context.Context, tx outbox.Tx, tb *table, stmt, arg string, requests [][]byte) ([]string, error) {
	rows, err := tx.Query(ctx, stmt, arg, requests)
	if err != nil {
		return nil, txError(tb.name, "append intents to", err)
	}
	defer rows.Close()
	var refused []string
	for rows.Next() {
		var id sql.NullString
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("pgbox: append intents to %s: %w", tb.name, err)
		}
		if id.Valid { // the notification's row has none
			refused = append(refused, id.String)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, txError(tb.name, "append intents to", err)
	}
	return refused, nil
}

// intentsArg encodes rs and their intents as the AppendIntents
// statement's arguments: the records as JSON, the requests as they are.
func intentsArg(rs []outbox.Record, ins []outbox.Intent) (string, [][]byte, error) {
	recs := make([]*outbox.Record, len(rs))
	for i := range rs {
		recs[i] = &rs[i]
	}
	rows := batchRows(recs, nil)
	out := make([]intentRow, len(rs))
	requests := make([][]byte, len(rs))
	size := 0
	for i := range rs {
		out[i] = intentRow{batchRow: rows[i], TaskName: rs[i].TaskName}
		requests[i] = ins[i].Request
		size += len(ins[i].Request)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", nil, err
	}
	if size += len(b); size > maxBulkArg {
		return "", nil, fmt.Errorf("pgbox: append %d intents: the statement's arguments are %d bytes; at most %d allowed: append them in smaller batches", len(rs), size, maxBulkArg)
	}
	return string(b), requests, nil
}
