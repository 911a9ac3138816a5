package pgbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox/pgmigrate"
)

// table is one outbox table as this store lays it out: its quoted name,
// its columns and the statements that use them.
type table struct {
	t      outbox.Table
	name   string // quoted schema.table
	bare   string // the table's own name, for its indexes' names
	id     string // the ID column
	cols   string // the columns a read returns, in scan order
	claims bool   // dispatch_outbox and timers carry a claim

	insert, reserve, byID, byCloudTaskID, byRunID, pending, claim, retain, stats string
}

// recordColumns are the columns every table has, in scan order after the
// ID column; the deliveries table adds deliveryColumns.
const (
	recordColumns = `version, cloud_task_id, queue, run_id, task_key, attempt, kind, status, error_code,
		create_calls, payload_sha256, processor_uuid, created_at, updated_at, due_at`
	deliveryColumns = `, retry_count, execution_count, http_status, latency_us`
	// traceColumns come last in every table: added after the others, by
	// an ALTER TABLE that Migrate runs on tables made before them.
	traceColumns = `, trace_id, span_id`
)

func newTable(o Config, t outbox.Table) *table {
	bare := o.TablePrefix + string(t)
	tb := &table{t: t, bare: bare, name: `"` + o.Schema + `"."` + bare + `"`, id: t.IDColumn(), claims: t != outbox.TableDeliveries}
	tb.cols = tb.id + ", " + recordColumns
	values := 16
	if t == outbox.TableDeliveries {
		tb.cols += deliveryColumns
		values += 4
	}
	tb.cols += traceColumns
	values += 2
	params := make([]string, values)
	for i := range params {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	// One statement per append, so an append is one round trip: the
	// version check and the unique index decide together, and updated_at
	// is nudged past the ID's latest so that it strictly increases.
	params[14] = `GREATEST($15::timestamptz, (SELECT max(updated_at) FROM ` + tb.name + ` WHERE ` + tb.id + ` = $1) + interval '1 microsecond')`
	insertIf := func(cond string) string {
		return `INSERT INTO ` + tb.name + ` (` + tb.cols + `)
		SELECT ` + strings.Join(params, ", ") + `
		WHERE ` + cond + `
		ON CONFLICT (` + tb.id + `, version) WHERE version > 0 DO NOTHING`
	}
	tb.insert = insertIf(`$2::bigint = 0 OR NOT EXISTS (SELECT 1 FROM ` + tb.name + ` WHERE ` + tb.id + ` = $1 AND version >= $2::bigint)`)
	// reserve is insert for an ID's first record: refused if the ID has
	// any (ReserveIntent).
	tb.reserve = insertIf(`NOT EXISTS (SELECT 1 FROM ` + tb.name + ` WHERE ` + tb.id + ` = $1)`)
	tb.byID = `SELECT ` + tb.cols + ` FROM ` + tb.name + ` WHERE ` + tb.id + ` = $1`
	tb.byCloudTaskID = `SELECT ` + tb.cols + ` FROM ` + tb.name + ` WHERE cloud_task_id = $1`
	tb.byRunID = `SELECT ` + tb.cols + ` FROM ` + tb.name + ` WHERE run_id = $1`
	// latest is true of a row p that no row of its ID is Newer than, in
	// outbox.Newer's own terms (text columns are in "C" collation: byte
	// order, as Go compares strings).
	latest := func(p string) string {
		return `NOT EXISTS (SELECT 1 FROM ` + tb.name + ` n WHERE n.` + tb.id + ` = ` + p + `.` + tb.id + ` AND n.seq <> ` + p + `.seq AND
			CASE WHEN n.version > 0 AND ` + p + `.version > 0 AND n.version <> ` + p + `.version THEN n.version > ` + p + `.version
			WHEN n.updated_at <> ` + p + `.updated_at THEN n.updated_at > ` + p + `.updated_at
			WHEN (n.status = 'pending') <> (` + p + `.status = 'pending') THEN ` + p + `.status = 'pending'
			WHEN n.status <> ` + p + `.status THEN n.status > ` + p + `.status
			ELSE n.processor_uuid > ` + p + `.processor_uuid END)`
	}
	stale := `p.status = 'pending' AND p.updated_at <= $1 AND ` + latest("p")
	tb.pending = `SELECT ` + tb.cols + ` FROM ` + tb.name + ` p WHERE ` + stale
	if tb.claims {
		tb.claim = `UPDATE ` + tb.name + ` SET claimed_by = $2, claim_expires = $3 WHERE seq IN (
			SELECT p.seq FROM ` + tb.name + ` p WHERE ` + stale + ` AND (p.claim_expires IS NULL OR p.claim_expires <= $4)
			AND ` + newIntents(o).notAwaitingRelay(tb.id) + `
			ORDER BY p.updated_at, p.` + tb.id + ` LIMIT ` + strconv.Itoa(claimBatch) + ` FOR UPDATE SKIP LOCKED)
			RETURNING ` + tb.cols
	}
	tb.stats = `SELECT status, queue, kind, processor_uuid, count(*) FROM ` + tb.name + ` p WHERE ` + latest("p") + `
		GROUP BY status, queue, kind, processor_uuid`
	tb.retain = `DELETE FROM ` + tb.name + ` WHERE ` + tb.id + ` IN (
		SELECT l.` + tb.id + ` FROM ` + tb.name + ` l WHERE l.updated_at < $1 AND l.status <> 'pending' AND ` + latest("l") + `
		AND ` + exportedCondition(o, tb, "l") + `
		LIMIT ` + strconv.Itoa(retainBatch) + `)`
	return tb
}

// ddl returns the statements that create the table and its indexes.
func (tb *table) ddl() []string {
	extra := ""
	if tb.t == outbox.TableDeliveries {
		extra = `,
			retry_count     integer NOT NULL,
			execution_count integer NOT NULL,
			http_status     integer NOT NULL,
			latency_us      bigint  NOT NULL`
	}
	if tb.claims {
		extra += `,
			claimed_by      text COLLATE "C",
			claim_expires   timestamptz`
	}
	index := func(suffix, def string) string {
		return `CREATE INDEX IF NOT EXISTS "` + tb.bare + `_` + suffix + `" ON ` + tb.name + ` ` + def
	}
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + tb.name + ` (
			seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			` + tb.id + `   text COLLATE "C" NOT NULL,
			version         bigint NOT NULL CHECK (version >= 0),
			cloud_task_id   text COLLATE "C" NOT NULL,
			queue           text COLLATE "C" NOT NULL,
			run_id          text COLLATE "C" NOT NULL,
			task_key        text COLLATE "C" NOT NULL,
			attempt         text COLLATE "C" NOT NULL,
			kind            text COLLATE "C" NOT NULL,
			status          text COLLATE "C" NOT NULL,
			error_code      text COLLATE "C" NOT NULL,
			create_calls    integer NOT NULL,
			payload_sha256  text COLLATE "C" NOT NULL,
			processor_uuid  text COLLATE "C" NOT NULL,
			created_at      timestamptz NOT NULL,
			updated_at      timestamptz NOT NULL,
			due_at          timestamptz` + extra + `
		)`,
		`ALTER TABLE ` + tb.name + ` ADD COLUMN IF NOT EXISTS trace_id text COLLATE "C", ADD COLUMN IF NOT EXISTS span_id text COLLATE "C"`,
		`COMMENT ON TABLE ` + tb.name + ` IS 'ctdispatch outbox table ` + string(tb.t) + `: one row per recorded state (github.com/ctdispatch/ctdispatch/outbox/pgbox)'`,
		// The unique index is what makes a conditional append
		// linearizable: of two writers of one version, one inserts and
		// the other finds the conflict. Version 0 rows are unconditional.
		`CREATE UNIQUE INDEX IF NOT EXISTS "` + tb.bare + `_version" ON ` + tb.name + ` (` + tb.id + `, version) WHERE version > 0`,
		index("id", `(`+tb.id+`, updated_at)`),
		index("cloud_task_id", `(cloud_task_id)`),
		index("run_id", `(run_id)`),
		index("updated_at", `(updated_at)`),
	}
	if tb.claims {
		stmts = append(stmts, index("pending", `(updated_at) WHERE status = 'pending'`))
	}
	return stmts
}

// migrateLock serialises concurrent Migrate calls (CREATE … IF NOT EXISTS
// is not safe against a concurrent CREATE of the same name). It differs
// from the worker inbox's.
const migrateLock = 7_304_119_220_260_002

// Migrate creates, in db, the schema and the three tables (with their
// indexes) that opts name, and the exporter's tables (see Exporter and
// QuarantineTableName), if they do not exist. It is idempotent and safe
// to run from several processes at once. It runs no exporter, whatever opts.Export says.
func Migrate(ctx context.Context, db *sql.DB, opts Config) error {
	opts.Export = ExportConfig{} // migrating runs no exporter
	o, err := New(db, opts)
	if err != nil {
		return err
	}
	return o.Migrate(ctx)
}

// Migrate creates the schema and the tables of o if they do not exist, as
// the package-level Migrate does. A schema that exists is left as it is,
// so a role that owns its schema and may not create others migrates; a
// statement the role may not run is named in the error with the
// privilege it needs.
func (o *Outbox) Migrate(ctx context.Context) error {
	var stmts []string
	for _, tb := range o.tables {
		stmts = append(stmts, tb.ddl()...)
	}
	stmts = append(stmts, o.intents.ddl()...)
	stmts = append(stmts, o.exportDDL()...)
	if err := pgmigrate.Run(ctx, o.db, migrateLock, o.opts.Schema, stmts); err != nil {
		return fmt.Errorf("pgbox: migrate %s: %w", o.opts.Schema, err)
	}
	return nil
}

var _ outbox.Checker = (*Outbox)(nil)

// Check implements outbox.Checker: it returns nil when every table and
// column Migrate makes exists, and otherwise an error naming what is
// missing and the command that makes it (matching outbox.ErrNotReady); a
// database it cannot query is another error. A dispatcher made on o calls it
// once (unless its Config says not to), so a process started on a
// database that was never migrated fails at once, not at its first call.
func (o *Outbox) Check(ctx context.Context) error {
	type item struct {
		Table  string  `json:"t"`
		Column *string `json:"c"` // nil: the table itself
	}
	var items []item
	tables := 0
	add := func(table string, columns ...string) {
		items = append(items, item{Table: table})
		tables++
		for _, c := range columns {
			items = append(items, item{Table: table, Column: &c})
		}
	}
	et := exportTablesOf(o.opts)
	add(o.intents.name)
	add(et.source)
	add(et.batches)
	for _, tb := range o.tables {
		add(tb.name, "trace_id", "export_batch") // the columns later Migrates added to tables made before
	}
	arg, err := json.Marshal(items)
	if err != nil {
		return err
	}
	rows, err := o.db.QueryContext(ctx, `SELECT x.t, x.c FROM jsonb_to_recordset($1::jsonb) AS x(t text, c text)
		WHERE CASE WHEN x.c IS NULL THEN to_regclass(x.t) IS NULL
			ELSE to_regclass(x.t) IS NOT NULL AND NOT EXISTS (
				SELECT 1 FROM pg_attribute a WHERE a.attrelid = to_regclass(x.t) AND a.attname = x.c AND NOT a.attisdropped) END`, string(arg))
	if err != nil {
		return fmt.Errorf("pgbox: check the tables: %w", err)
	}
	defer rows.Close()
	var missingTables, missingColumns []string
	for rows.Next() {
		var table string
		var column sql.NullString
		if err := rows.Scan(&table, &column); err != nil {
			return fmt.Errorf("pgbox: check the tables: %w", err)
		}
		if column.Valid {
			missingColumns = append(missingColumns, table+"."+column.String)
		} else {
			missingTables = append(missingTables, table)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgbox: check the tables: %w", err)
	}
	switch {
	case len(missingTables) == tables: // none: say so once
		return notReady{fmt.Errorf("pgbox: %w", errNotMigrated)}
	case len(missingTables) > 0:
		return notReady{fmt.Errorf("pgbox: %s missing: %w", strings.Join(missingTables, ", "), errNotMigrated)}
	case len(missingColumns) > 0:
		return notReady{fmt.Errorf(`pgbox: columns %s missing (the tables were made by an older Migrate); add them with "ctdispatch migrate --outbox postgres://…" or pgbox.Migrate`, strings.Join(missingColumns, ", "))}
	}
	return nil
}

// TableNames returns the quoted names (schema.table) of the three tables
// opts name, in the order of outbox.Tables.
func TableNames(opts Config) [3]string {
	opts = opts.withDefaults()
	var names [3]string
	for i, t := range outbox.Tables() {
		names[i] = `"` + opts.Schema + `"."` + opts.TablePrefix + string(t) + `"`
	}
	return names
}
