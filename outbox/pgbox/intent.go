package pgbox

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// IntentTable is the name, after Config.TablePrefix, of the table of
// intents: the CreateTask requests that callers' transactions recorded and
// that no relay has finished yet.
const IntentTable = "intents"

var (
	_ outbox.Intents = (*Outbox)(nil)
	_ outbox.Notices = (*Outbox)(nil)
)

// IntentTableName returns the quoted name (schema.table) of the intents
// table opts name.
func IntentTableName(opts Config) string {
	return newIntents(opts.withDefaults()).name
}

// intents is the layout of the intents table and its statements.
type intents struct {
	name, bare                        string
	upsert, claim, drop, release, has string
	// upsertNotify is upsert that also sends NoticeIntents on channel,
	// which is "" under Config.NoNotify.
	upsertNotify, channel string
	// gap spaces the upserts that notify (Config.NotifyGap); last is
	// when one last did, in Unix nanoseconds.
	gap  time.Duration
	last *atomic.Int64
}

func newIntents(o Config) intents {
	in := intents{bare: o.TablePrefix + IntentTable, gap: o.NotifyGap, last: new(atomic.Int64)}
	in.name = `"` + o.Schema + `"."` + in.bare + `"`
	if !o.NoNotify {
		in.channel = noticeChannel(o)
	}
	// A later transaction's intent of an ID (a repeat, with the newer
	// pending record's version, or a cancel) replaces the ID's intent but
	// keeps its claim: a relay working on the older one finishes first
	// (it records nothing over a newer version), and its DropIntent, which
	// finds the intent replaced, releases the claim for the next pass. A
	// cancel thus never runs beside the create it replaces.
	in.upsert = `INSERT INTO ` + in.name + ` (id, record_table, version, queue, task_name, schedule_time, request, created_at, op)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (id) DO UPDATE SET ` + intentUpdate
	in.upsertNotify = in.notifying(in.upsert, true)
	// $6 are the expiries of this outbox's claims whose answer was lost:
	// their intents are this processor's and no relay works on them.
	in.claim = `UPDATE ` + in.name + ` SET claimed_by = $2, claim_expires = $3 WHERE id IN (
			SELECT id FROM ` + in.name + ` WHERE queue = ANY($1::text[])
				AND (claim_expires IS NULL OR claim_expires <= $4 OR (claimed_by = $2 AND claim_expires = ANY($6::timestamptz[])))
			ORDER BY created_at, id LIMIT $5 FOR UPDATE SKIP LOCKED)
		RETURNING op, record_table, id, version, queue, request, created_at`
	in.drop = `DELETE FROM ` + in.name + ` WHERE id = $1 AND version = $2 AND op = $3`
	in.release = in.notifying(`UPDATE `+in.name+` SET claimed_by = NULL, claim_expires = NULL WHERE id = ANY($1::text[]) AND claimed_by = $2`, false)
	in.has = `SELECT EXISTS (SELECT 1 FROM ` + in.name + ` WHERE id = $1)`
	return in
}

// intentUpdate is how an intent replaces the one of its ID: every
// column but the claim.
const intentUpdate = `op = EXCLUDED.op, record_table = EXCLUDED.record_table, version = EXCLUDED.version, queue = EXCLUDED.queue,
	task_name = EXCLUDED.task_name, schedule_time = EXCLUDED.schedule_time, request = EXCLUDED.request, created_at = EXCLUDED.created_at`

// notifying returns stmt (an INSERT or UPDATE) so that it also sends
// NoticeIntents on the channel: unconditionally when always, otherwise
// only when it changed a row. The notification goes with the statement's
// transaction: a caller's transaction notifies when it commits, and
// PostgreSQL sends one notification per channel and payload however many
// statements of the transaction asked for it.
func (in intents) notifying(stmt string, always bool) string {
	if in.channel == "" {
		return stmt
	}
	notify := `pg_notify('` + in.channel + `', '` + outbox.NoticeIntents + `')`
	if always {
		return `WITH w AS (` + stmt + ` RETURNING 1) SELECT ` + notify + ` FROM w`
	}
	return `WITH w AS (` + stmt + ` RETURNING 1) SELECT ` + notify + ` WHERE EXISTS (SELECT 1 FROM w)`
}

// upsertFor returns the upsert a new intent uses now: the one that
// notifies when it is notifyTurn, the plain one otherwise.
func (in intents) upsertFor() string {
	if in.notifyTurn() {
		return in.upsertNotify
	}
	return in.upsert
}

// notifyTurn reports whether a statement that records intents now
// notifies: when the outbox notifies at all, the last one did at least
// gap ago, and this call is the one that takes the turn.
func (in intents) notifyTurn() bool {
	if in.channel == "" {
		return false
	}
	// Real time, not the outbox's clock: the gap spares the server's
	// commits, which a test's clock does not slow.
	now := time.Now().UnixNano()
	last := in.last.Load()
	return now-last >= int64(in.gap) && in.last.CompareAndSwap(last, now)
}

// noticeChannel names the channel of the outbox's notifications after
// its intents table, schema.table; a name longer than PostgreSQL's 63
// bytes for a channel is replaced by a hash of it. Schema and prefix are
// plain identifiers, so the name needs no quoting in a string literal.
func noticeChannel(o Config) string {
	name := o.Schema + "." + o.TablePrefix + IntentTable
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "ctdispatch_" + hex.EncodeToString(sum[:16])
}

// NoticeChannel implements outbox.Notices: the channel the outbox's
// notifications go to, a relay's Listener listens on, and PostgreSQL's
// LISTEN names (quoted: it holds a dot), or "" under Config.NoNotify.
// It is the intents table's schema-qualified name, "public.ctdispatch_intents"
// by default, or a hash of it when that is longer than 63 bytes.
func (o *Outbox) NoticeChannel() string { return o.intents.channel }

// NoticeGap implements outbox.Notices: Config.NotifyGap (0 when every
// transaction notifies).
func (o *Outbox) NoticeGap() time.Duration { return o.intents.gap }

// NotifyOutcomes implements outbox.Notices: it sends NoticeOutcomes on
// the outbox's channel, in a statement of its own. Under
// Config.NoNotify it does nothing.
func (o *Outbox) NotifyOutcomes(ctx context.Context) error {
	if o.intents.channel == "" {
		return nil
	}
	if _, err := o.db.ExecContext(ctx, `SELECT pg_notify($1, $2)`, o.intents.channel, outbox.NoticeOutcomes); err != nil {
		return fmt.Errorf("pgbox: notify outcomes: %w", err)
	}
	return nil
}

// notAwaitingRelay is true of a row p of an outbox table whose ID has no
// intent waiting for a relay: Recover leaves those to the relays, which
// alone can create their tasks.
func (in intents) notAwaitingRelay(idColumn string) string {
	return `NOT EXISTS (SELECT 1 FROM ` + in.name + ` i WHERE i.id = p.` + idColumn + `)`
}

// ddl returns the statements that create the intents table and its index.
func (in *intents) ddl() []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + in.name + ` (
			id             text COLLATE "C" PRIMARY KEY,
			op             text COLLATE "C" NOT NULL CHECK (op IN ('create', 'delete')),
			record_table   text COLLATE "C" NOT NULL,
			version        bigint NOT NULL CHECK (version >= 0),
			queue          text COLLATE "C" NOT NULL,
			task_name      text COLLATE "C" NOT NULL,
			schedule_time  timestamptz,
			request        bytea NOT NULL,
			created_at     timestamptz NOT NULL,
			claimed_by     text COLLATE "C",
			claim_expires  timestamptz
		)`,
		`COMMENT ON TABLE ` + in.name + ` IS 'ctdispatch intents: CreateTask requests recorded in callers'' transactions, until a relay creates them (github.com/ctdispatch/ctdispatch/outbox/pgbox)'`,
		`CREATE INDEX IF NOT EXISTS "` + in.bare + `_queue" ON ` + in.name + ` (queue, created_at)`,
	}
}

// SQLTx returns tx, a transaction on the outbox's database, as the
// transaction a dispatcher's DispatchTx and ScheduleTimerTx take. The
// caller still commits or rolls it back.
func SQLTx(tx *sql.Tx) outbox.Tx { return sqlTx{tx} }

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTx) Query(ctx context.Context, query string, args ...any) (outbox.Rows, error) {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

// LatestTx implements outbox.Intents: Latest, read inside tx.
func (o *Outbox) LatestTx(ctx context.Context, tx outbox.Tx, t outbox.Table, id string) (outbox.Record, bool, error) {
	tb, err := o.table(t)
	if err != nil {
		return outbox.Record{}, false, err
	}
	recs, err := queryTx(ctx, tx, tb, tb.byID, id)
	if err != nil || len(recs) == 0 {
		return outbox.Record{}, false, err
	}
	return newest(recs), true, nil
}

// queryTx is query on a caller's transaction.
func queryTx(ctx context.Context, tx outbox.Tx, tb *table, stmt string, args ...any) ([]outbox.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, stmt, args...)
	if err != nil {
		return nil, txError(tb.name, "read", err)
	}
	defer rows.Close()
	return scanRecords(tb, rows, func(err error) error { return txError(tb.name, "read", err) })
}

// txError wraps an error of a statement on table, saying how to create the
// tables when they are missing.
func txError(table, op string, err error) error {
	if sqlState(err) == undefinedTable {
		return fmt.Errorf("pgbox: %s %s: %w", op, table, errNotMigrated)
	}
	return fmt.Errorf("pgbox: %s %s: %w", op, table, err)
}

// AppendIntent implements outbox.Intents: inside tx, in one statement, it
// inserts r (a pending record, conditional on its Version as Append is)
// and then in, the task's CreateTask request, replacing an unfinished
// intent of the same ID. Both are kept if and only if tx commits; until then no other transaction sees
// them, and a concurrent writer of the same version waits for tx to end.
func (o *Outbox) AppendIntent(ctx context.Context, tx outbox.Tx, r outbox.Record, in outbox.Intent) error {
	n, err := o.execIntent(ctx, tx, &r, &in, o.appendIntent, o.appendIntentNotify)
	if err != nil {
		return err
	}
	if n == 0 {
		cur, ok, err := o.LatestTx(ctx, tx, r.Table, r.ID)
		switch {
		case err != nil:
			return fmt.Errorf("pgbox: append %s %s: version %d refused; reading the winner: %w", r.Table, r.ID, r.Version, err)
		case !ok:
			return fmt.Errorf("pgbox: append %s %s: version %d refused, but no record of the ID is left to read", r.Table, r.ID, r.Version)
		}
		return &outbox.VersionConflictError{Table: r.Table, ID: r.ID, Version: r.Version, Current: cur}
	}
	return nil
}

var _ outbox.IntentReserver = (*Outbox)(nil)

// ReserveIntent implements outbox.IntentReserver: AppendIntent's one
// statement, with the record inserted only if the ID has none at all (a
// concurrent first record makes it wait for that transaction, and then
// refuse). Refused, it reads nothing: the caller does.
func (o *Outbox) ReserveIntent(ctx context.Context, tx outbox.Tx, r outbox.Record, in outbox.Intent) (bool, error) {
	if r.Version != 1 {
		return false, &outbox.RecordError{ID: r.ID, Field: "Version", Value: fmt.Sprint(r.Version), Rule: "must be 1: ReserveIntent writes an ID's first record"}
	}
	n, err := o.execIntent(ctx, tx, &r, &in, o.reserveIntent, o.reserveIntentNotify)
	return n > 0, err
}

// execIntent checks r and in and runs stmt, or notify when it is the
// notification's turn, over them in tx; it returns the rows the
// statement returned: 1 when it inserted, 0 when it refused.
func (o *Outbox) execIntent(ctx context.Context, tx outbox.Tx, r *outbox.Record, in *outbox.Intent, stmt, notify map[outbox.Table]string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	tb, err := o.table(r.Table)
	if err != nil {
		return 0, err
	}
	if err := r.Prepare(o.processor, o.clock.Now()); err != nil {
		return 0, err
	}
	if err := in.Validate(r); err != nil {
		return 0, err
	}
	s := stmt[r.Table]
	if o.intents.notifyTurn() {
		s = notify[r.Table]
	}
	n, err := tx.Exec(ctx, s, append(insertArgs(r), r.TaskName, in.Request)...)
	if err != nil {
		return 0, txError(tb.name, "append", err)
	}
	return n, nil
}

// intentStatement returns AppendIntent's statement on tb, a table with
// intents (insert being tb.insert; ReserveIntent's with tb.reserve): the
// insert of the record (its parameters, then the
// task's name and request), and, when it inserted, the intent's upsert,
// in one statement and one round trip. It returns one row when it
// inserted (with the notification of intents, when notify) and none when
// the record was refused.
func intentStatement(tb *table, insert string, in intents, notify bool) string {
	k := strings.Count(tb.cols, ",") + 1 // the record's parameters
	name, request := "$"+strconv.Itoa(k+1), "$"+strconv.Itoa(k+2)
	stmt := `WITH ins AS (` + insert + ` RETURNING 1),
		w AS (INSERT INTO ` + in.name + ` (id, record_table, version, queue, task_name, schedule_time, request, created_at, op)
			SELECT $1::text, '` + string(tb.t) + `', $2::bigint, $4::text, ` + name + `::text, $16::timestamptz, ` + request + `::bytea, $15::timestamptz, '` + opCreate + `' FROM ins
			ON CONFLICT (id) DO UPDATE SET ` + intentUpdate + `
			RETURNING 1)
		SELECT `
	if notify && in.channel != "" {
		return stmt + `pg_notify('` + in.channel + `', '` + outbox.NoticeIntents + `') FROM w`
	}
	return stmt + `1 FROM w`
}

// The intents' op column.
const (
	opCreate = "create"
	opDelete = "delete"
)

func opOf(in outbox.Intent) string {
	if in.Delete {
		return opDelete
	}
	return opCreate
}

// AppendCancel implements outbox.Intents: inside tx it records in, a
// delete intent, replacing an unfinished intent of the same ID; it is kept
// if and only if tx commits.
func (o *Outbox) AppendCancel(ctx context.Context, tx outbox.Tx, in outbox.Intent) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := in.Validate(nil); err != nil { // a create needs its record: AppendIntent
		return err
	}
	cloudTaskID, err := naming.CloudTaskID(in.ID)
	if err != nil {
		return err // Validate checked it
	}
	now := o.clock.Now()
	if _, err := tx.Exec(ctx, o.intents.upsertFor(), in.ID, string(in.Table), in.Version, in.Queue, naming.TaskName(in.Queue, cloudTaskID),
		sql.NullTime{}, []byte{}, now, opDelete); err != nil {
		return txError(o.intents.name, "append intent to", err)
	}
	return nil
}

// HasIntent implements outbox.Intents.
func (o *Outbox) HasIntent(ctx context.Context, id string) (bool, error) {
	var has bool
	if err := o.db.QueryRowContext(ctx, o.intents.has, id).Scan(&has); err != nil {
		return false, txError(o.intents.name, "read", err)
	}
	return has, nil
}

// ClaimIntents implements outbox.Intents: in one statement (a short
// transaction of its own) it picks up to max unclaimed intents of queues,
// oldest first, skipping those another ClaimIntents is claiming at that
// moment (FOR UPDATE SKIP LOCKED), and claims them for this processor
// until claimFor from now. Only committed intents are seen: a transaction
// that rolls back leaves none.
//
// A claim that fails may still have committed: the database crashed, or
// the connection dropped, after the claim and before its answer. Its
// intents are then this processor's and nobody's work, so the outbox
// keeps the claim's expiry and its next ClaimIntents takes them back, at
// once instead of after claimFor.
func (o *Outbox) ClaimIntents(ctx context.Context, queues []string, max int, claimFor time.Duration) ([]outbox.Intent, error) {
	switch {
	case max < 1:
		return nil, &ConfigError{Field: "max", Value: fmt.Sprint(max), Rule: "must be 1 or more"}
	case claimFor <= 0:
		return nil, &ConfigError{Field: "claimFor", Value: claimFor.String(), Rule: "must be positive: a claim that has expired already shares nothing"}
	case len(queues) == 0:
		return nil, ctx.Err()
	}
	now := o.clock.Now()
	// Microseconds, as PostgreSQL keeps it, so that a lost claim's expiry
	// matches the row's exactly.
	expires := now.Add(claimFor).Truncate(time.Microsecond)
	out, err := o.claimIntents(ctx, queues, max, now, expires)
	if err != nil {
		o.lostClaims.add(expires)
		return nil, err
	}
	// RETURNING gives no order: oldest first, as the claim picked them.
	sortIntents(out)
	return out, nil
}

func (o *Outbox) claimIntents(ctx context.Context, queues []string, max int, now, expires time.Time) ([]outbox.Intent, error) {
	rows, err := o.db.QueryContext(ctx, o.intents.claim, queues, o.processor, expires, now, max, o.lostClaims.after(now))
	if err != nil {
		return nil, txError(o.intents.name, "claim from", err)
	}
	defer rows.Close()
	var out []outbox.Intent
	for rows.Next() {
		var in outbox.Intent
		var op, table string
		if err := rows.Scan(&op, &table, &in.ID, &in.Version, &in.Queue, &in.Request, &in.CreatedAt); err != nil {
			return nil, fmt.Errorf("pgbox: claim from %s: %w", o.intents.name, err)
		}
		in.Delete, in.Table, in.CreatedAt = op == opDelete, outbox.Table(table), in.CreatedAt.UTC()
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, txError(o.intents.name, "claim from", err)
	}
	return out, nil
}

// lostClaims are the expiries of claims whose answer did not arrive, kept
// until they pass. A later claim also takes back the intents still
// claimed by this processor until one of them; those it leaves (past its
// batch) the next one takes.
type lostClaims struct {
	mu       sync.Mutex
	expiries []time.Time
}

// maxLostClaims bounds the expiries kept while claims keep failing (a
// database down for long): the oldest are forgotten, and their intents
// wait out their claims.
const maxLostClaims = 32

func (l *lostClaims) add(expires time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expiries = append(l.expiries, expires)
	if len(l.expiries) > maxLostClaims {
		l.expiries = slices.Delete(l.expiries, 0, len(l.expiries)-maxLostClaims)
	}
}

// after drops the expiries that now has passed (those intents are free
// anyway) and returns the rest.
func (l *lostClaims) after(now time.Time) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expiries = slices.DeleteFunc(l.expiries, func(t time.Time) bool { return !t.After(now) })
	return slices.Clone(l.expiries)
}

// DropIntent implements outbox.Intents: it deletes in unless a later
// transaction replaced it with another version or another op; then it
// releases this processor's claim on the replacement, which the next
// ClaimIntents returns.
func (o *Outbox) DropIntent(ctx context.Context, in outbox.Intent) error {
	res, err := o.db.ExecContext(ctx, o.intents.drop, in.ID, in.Version, opOf(in))
	if err != nil {
		return txError(o.intents.name, "drop from", err)
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	return o.release(ctx, []string{in.ID})
}

var _ outbox.OutcomeAppender = (*Outbox)(nil)

// AppendOutcome implements outbox.OutcomeAppender: r goes into the batch
// statement that groups concurrent appends (see Append), and that
// statement also deletes in, or, when a later transaction replaced it,
// releases this processor's claim on the replacement and notifies the
// listening relays, as DropIntent does: one statement and one commit for
// the outcome and the drop, instead of one each.
func (o *Outbox) AppendOutcome(ctx context.Context, r outbox.Record, in outbox.Intent) error {
	if err := outbox.CheckOutcome(&r, &in); err != nil {
		return err
	}
	return o.appendRecord(ctx, r, nil, false, &in)
}

// ReleaseIntents implements outbox.Intents: in one statement it clears
// this processor's claims on ins, and, when it cleared any, notifies the
// listening relays (unless Config.NoNotify).
func (o *Outbox) ReleaseIntents(ctx context.Context, ins []outbox.Intent) error {
	if len(ins) == 0 {
		return ctx.Err()
	}
	ids := make([]string, len(ins))
	for i, in := range ins {
		ids[i] = in.ID
	}
	return o.release(ctx, ids)
}

func (o *Outbox) release(ctx context.Context, ids []string) error {
	if _, err := o.db.ExecContext(ctx, o.intents.release, ids, o.processor); err != nil {
		return txError(o.intents.name, "release claims in", err)
	}
	return nil
}

// sortIntents orders intents oldest first, then by ID.
func sortIntents(ins []outbox.Intent) {
	slices.SortFunc(ins, func(a, b outbox.Intent) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}
