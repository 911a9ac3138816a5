package pgbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Defaults of ExportConfig.
const (
	// DefaultExportInterval is how often an exporter looks for changes:
	// a committed change is in Parquet within this long (one and a half
	// times this with several exporters, which space their batches), plus
	// the time a batch takes to write: inside a minute.
	DefaultExportInterval = 30 * time.Second
	// MinExportInterval is the shortest ExportConfig.Interval: every batch
	// writes a file per table, day and bucket it touches, so shorter would
	// only multiply small files.
	MinExportInterval = time.Second
	// DefaultExportBatchRows bounds the rows of each table one batch holds:
	// about 10 MB of records in memory per table while the batch is written.
	DefaultExportBatchRows = 20_000
	// DefaultExportLease is how long a batch stays its exporter's before
	// another may take it over and write it.
	DefaultExportLease = 2 * time.Minute
)

// ExportConfig configures an Exporter (and Config.Export, which runs one
// inside the outbox). The zero value exports nothing: Root and Open are
// required.
type ExportConfig struct {
	// Root is where the Parquet tables go: a local directory or a bucket
	// URL, as Open takes it. The exporter hands it to Open and names it in
	// its logs and errors.
	Root string
	// Open opens the tables at Root that the batches are written to. This
	// package writes no Parquet itself (it links no store but its own):
	// the program opens them with package outbox/parquetbox, read-only
	// since the exporter keeps no log of its own (see the Exporter
	// example; a read-only parquetbox opens only a local directory that
	// exists, so create it first). The exporter calls Open at its first
	// pass, again at the next pass after a failure, and closes what it
	// returned in Close.
	Open func(ctx context.Context, root string) (outbox.RunWriter, error)
	// Interval is how often the exporter looks for changes that are not yet
	// exported. Several exporters on one database space their batches by
	// half of it between them. Defaults to DefaultExportInterval; at least
	// MinExportInterval.
	Interval time.Duration
	// BatchRows bounds the rows of each table one batch takes (a batch is
	// held in memory while its files are written); a full batch is
	// followed at once by the next. Defaults to DefaultExportBatchRows.
	BatchRows int
	// Lease is how long a batch stays claimed by its exporter: an exporter
	// that died with a batch unwritten leaves it to another after this
	// long. Defaults to DefaultExportLease; at least a second.
	Lease time.Duration
	// Logger receives the failures of Run's passes (Run goes on), a
	// warning for each batch holding rows the exporter refused (see
	// Exporter), and at debug level the batches each pass wrote. Defaults
	// to discarding.
	Logger *slog.Logger
	// MeterProvider receives the exporter's metric, MetricExportRefused.
	// Defaults to a no-op provider.
	MeterProvider metric.MeterProvider
}

// set reports whether any option is given (Config.Export runs an
// exporter only then).
func (e ExportConfig) set() bool {
	return e.Root != "" || e.Open != nil || e.Interval != 0 || e.BatchRows != 0 || e.Lease != 0 ||
		e.Logger != nil || e.MeterProvider != nil
}

func (e ExportConfig) withDefaults() ExportConfig {
	if e.Interval == 0 {
		e.Interval = DefaultExportInterval
	}
	if e.BatchRows == 0 {
		e.BatchRows = DefaultExportBatchRows
	}
	if e.Lease == 0 {
		e.Lease = DefaultExportLease
	}
	if e.Logger == nil {
		e.Logger = slog.New(slog.DiscardHandler)
	}
	if e.MeterProvider == nil {
		e.MeterProvider = noop.NewMeterProvider()
	}
	return e
}

func (e ExportConfig) validate(field string) error {
	switch {
	case e.Root == "":
		return &ConfigError{Field: field + ".Root", Value: `""`, Rule: "is required: a directory or a bucket URL for the Parquet tables"}
	case e.Open == nil:
		return &ConfigError{Field: field + ".Open", Value: "nil", Rule: "is required: the function that opens the Parquet tables at Root (package outbox/parquetbox)"}
	case e.Interval < MinExportInterval:
		return &ConfigError{Field: field + ".Interval", Value: e.Interval.String(), Rule: "is below the minimum " + MinExportInterval.String()}
	case e.BatchRows < 1:
		return &ConfigError{Field: field + ".BatchRows", Value: strconv.Itoa(e.BatchRows), Rule: "must be positive"}
	case e.Lease < time.Second:
		return &ConfigError{Field: field + ".Lease", Value: e.Lease.String(), Rule: "is below the minimum 1s"}
	}
	return nil
}

// exportTables are the names of the exporter's own two tables.
type exportTables struct {
	source  string // one row: the name the database's files carry
	batches string // one row per batch
	bare    string // the batches table's own name, for its index
}

func exportTablesOf(o Config) exportTables {
	q := func(name string) string { return `"` + o.Schema + `"."` + o.TablePrefix + name + `"` }
	return exportTables{source: q("export"), batches: q("export_batches"), bare: o.TablePrefix + "export_batches"}
}

// exportDDL returns the statements that create the exporter's tables and
// the batch column of every record table. A row's export_batch is NULL
// until a batch claims it: that, not a sequence's high-water mark, is what
// finds a row whose transaction committed after a later row's.
func (o *Outbox) exportDDL() []string {
	et := exportTablesOf(o.opts)
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + et.source + ` (
			singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
			source    text COLLATE "C" NOT NULL,
			since     timestamptz NOT NULL
		)`,
		`COMMENT ON TABLE ` + et.source + ` IS 'ctdispatch outbox export: its row names the exported files; while it exists, Retain keeps unexported rows (github.com/ctdispatch/ctdispatch/outbox/pgbox)'`,
		`CREATE TABLE IF NOT EXISTS ` + et.batches + ` (
			batch         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			rows          bigint NOT NULL DEFAULT 0,
			full_batch    boolean NOT NULL DEFAULT false,
			claimed_by    text COLLATE "C" NOT NULL,
			lease_expires timestamptz NOT NULL,
			created_at    timestamptz NOT NULL,
			written_at    timestamptz
		)`,
		`CREATE INDEX IF NOT EXISTS "` + et.bare + `_unwritten" ON ` + et.batches + ` (batch) WHERE written_at IS NULL`,
	}
	stmts = append(stmts, o.quarantineDDL()...)
	for _, tb := range o.tables {
		stmts = append(stmts,
			`ALTER TABLE `+tb.name+` ADD COLUMN IF NOT EXISTS export_batch bigint`,
			`CREATE INDEX IF NOT EXISTS "`+tb.bare+`_unexported" ON `+tb.name+` (seq) WHERE export_batch IS NULL`,
			`CREATE INDEX IF NOT EXISTS "`+tb.bare+`_export_batch" ON `+tb.name+` (export_batch) WHERE export_batch IS NOT NULL`,
		)
	}
	return stmts
}

// exportedCondition is true of a row l of tb whose ID Retain may delete as
// far as the export goes: no exporter was ever started on the database, or
// every row of the ID is in a batch whose files are written (a refused
// row, in no batch, keeps its ID).
func exportedCondition(o Config, tb *table, l string) string {
	et := exportTablesOf(o)
	return `(NOT EXISTS (SELECT 1 FROM ` + et.source + `) OR NOT EXISTS (
			SELECT 1 FROM ` + tb.name + ` u LEFT JOIN ` + et.batches + ` b ON b.batch = u.export_batch
			WHERE u.` + tb.id + ` = ` + l + `.` + tb.id + ` AND b.written_at IS NULL))`
}

// exportLock is the advisory lock (with the tables' hash as its second
// key) under which exporters claim batches, one at a time per database
// and tables.
const exportLock = 73_041_192

// Exporter writes every state the outbox's tables record to Parquet
// tables in the layout of outbox/parquetbox (dispatch_outbox, timers and
// deliveries; created_date=YYYY-MM-DD partitions; bucketed file names),
// each state once, so that analysts query a PostgreSQL outbox's history
// as they query a Parquet one, and "ctdispatch compact", "stats" and the
// manifests work on the exported tree.
//
// Rows go out in batches. A batch is claimed in one short transaction,
// under an advisory lock: it gets the next number and marks up to
// BatchRows rows of each table not yet in a batch as its own
// (export_batch), so its membership is fixed in the database before any
// file is written. The batch's rows are then written as a run named by
// the database's export source and the batch number
// (b<k>of<n>-<source>-<batch>.parquet), and the batch is marked written.
// An exporter that dies before that leaves the batch claimed until its
// lease expires; the next exporter then writes the same rows under the
// same names again, which replaces the files whole. A row whose
// transaction commits after rows of a later batch were claimed is still
// unclaimed, and goes into the next batch. Several exporters on one
// database (one per dispatcher) share the work and never export a row
// twice.
//
// A row is marked exported only once a file holds it. A row the
// exporter will not write, one Record.Distrust finds no dispatcher can
// have written (a cloud_task_id that is not the hash of its ID: typed in
// by hand, written by another tool, damaged), leaves its batch before
// the files are written and is marked refused: it stays in the database,
// in no batch, so Retain keeps its ID and no later batch takes it again.
// Each batch that refuses rows is reported: in ExportStats (counts and a
// few rows with the reason), in a warning to ExportConfig.Logger, and
// in the counter MetricExportRefused. Outbox.Refused lists them all;
// Outbox.DeleteRefused and QuarantineRefused remove them on purpose.
type Exporter struct {
	o    *Outbox
	opts ExportConfig
	id   string // claims batches
	et   exportTables
	lock string // the tables' hash, the advisory lock's second key
	// unexported asks whether any row is in no batch yet.
	unexported string
	// passing serialises this exporter's passes, so that ExportOnce
	// (Flush) waits for Run's pass under way, whose batch it could not
	// take, and returns only once that batch is written too.
	passing sync.Mutex
	mu      sync.Mutex
	src     string           // the database's export source, once registered
	files   outbox.RunWriter // the Parquet tables, once opened
	// refused counts the rows refused (MetricExportRefused).
	refused metric.Int64Counter
}

// NewExporter returns an exporter of o's tables to opts.Root. It does no
// I/O: the first pass registers the export in the database (from then on
// Retain keeps unexported rows) and opens Root with opts.Open.
func NewExporter(o *Outbox, opts ExportConfig) (*Exporter, error) {
	if o == nil {
		return nil, &ConfigError{Field: "o", Value: "nil", Rule: "is required"}
	}
	opts = opts.withDefaults()
	if err := opts.validate("ExportConfig"); err != nil {
		return nil, err
	}
	refused, err := opts.MeterProvider.Meter(meterName).Int64Counter(MetricExportRefused,
		metric.WithDescription("Rows an exporter refused to write to Parquet because no dispatcher can have written them, by table."))
	if err != nil {
		return nil, fmt.Errorf("pgbox: export: the metric %s: %w", MetricExportRefused, err)
	}
	var exists []string
	for _, tb := range o.tables {
		exists = append(exists, `EXISTS (SELECT 1 FROM `+tb.name+` WHERE export_batch IS NULL)`)
	}
	return &Exporter{o: o, opts: opts, id: uuid.Must(uuid.NewV7()).String(), et: exportTablesOf(o.opts),
		lock:       `hashtext('` + o.opts.Schema + `.` + o.opts.TablePrefix + `')`,
		unexported: `SELECT ` + strings.Join(exists, ` OR `), refused: refused}, nil
}

// ExportStats says what a pass exported.
type ExportStats struct {
	// Batches are the numbers of the batches written, in order.
	Batches []int64
	// Rows counts the rows written, per table in the order of
	// outbox.Tables.
	Rows [3]int64
	// Refused counts the rows the pass refused to write, per table: rows
	// no dispatcher can have written (see Exporter). They stay in the
	// database, unexported, until removed on purpose (Outbox.Refused
	// lists them all).
	Refused [3]int64
	// RefusedSample is the first few refused rows (at most 5), each with
	// the reason.
	RefusedSample []RefusedRow
}

// add counts a written batch.
func (st *ExportStats) add(batch int64, w written) {
	st.Batches = append(st.Batches, batch)
	for i := range w.rows {
		st.Rows[i] += w.rows[i]
		st.Refused[i] += w.refused[i]
	}
	st.RefusedSample = append(st.RefusedSample, w.sample[:min(len(w.sample), maxRefusedSample-len(st.RefusedSample))]...)
}

// Source returns the name the exported files carry after their bucket,
// the database's export source (a UUID chosen by the first exporter ever
// started on the database), or "" before the first pass.
func (e *Exporter) Source() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.src
}

// ExportOnce exports every change committed before it was called (but
// those in a batch another live exporter is writing), and returns what it
// wrote: it writes batches, first those of exporters whose lease expired,
// until one is not full.
func (e *Exporter) ExportOnce(ctx context.Context) (ExportStats, error) {
	return e.pass(ctx, 0)
}

// Run exports every Interval until ctx ends, then returns nil. A pass that
// fails is logged and the next one tries again. A pass claims a new batch
// only when no other exporter on the database claimed one within half the
// interval (unless that batch was full), so that several exporters write
// about one batch per interval between them, not one each; a change then
// waits at most one and a half intervals.
func (e *Exporter) Run(ctx context.Context) error {
	for {
		st, err := e.pass(ctx, e.opts.Interval/2)
		if err != nil && ctx.Err() == nil {
			e.opts.Logger.Error("pgbox: export pass failed; the next retries", "root", e.opts.Root, "err", err)
		}
		if len(st.Batches) > 0 {
			e.opts.Logger.Debug("pgbox: exported", "root", e.opts.Root, "batches", st.Batches, "rows", st.Rows)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-e.o.clock.After(e.opts.Interval):
		}
	}
}

// Close closes the Parquet tables that ExportConfig.Open opened, if it
// was called. The exporter is not used after.
func (e *Exporter) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.files == nil {
		return nil
	}
	err := e.files.Close()
	e.files = nil
	return err
}

// pass writes batches until none is left; spacing, when positive, is how
// recently another batch may have been claimed before this pass claims a
// new one (batches taken over are written regardless).
func (e *Exporter) pass(ctx context.Context, spacing time.Duration) (ExportStats, error) {
	e.passing.Lock()
	defer e.passing.Unlock()
	var st ExportStats
	files, err := e.prepare(ctx)
	if err != nil {
		return st, err
	}
	for {
		b, err := e.claim(ctx, spacing)
		if err != nil || b.batch == 0 {
			return st, err
		}
		w, err := e.write(ctx, files, b.batch)
		if err != nil {
			return st, errors.Join(err, e.release(ctx, b.batch))
		}
		if w.ok {
			st.add(b.batch, w)
		}
		if !b.full && !b.takenOver {
			// It took every row committed before its claim: the pass is
			// done (what commits meanwhile waits for the next pass, so a
			// busy database cannot keep a pass going).
			return st, nil
		}
	}
}

// prepare registers the export in the database (once) and opens the
// Parquet tables, with their schema files.
func (e *Exporter) prepare(ctx context.Context) (outbox.RunWriter, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.files != nil {
		return e.files, nil
	}
	if e.src == "" {
		_, err := e.o.db.ExecContext(ctx, `INSERT INTO `+e.et.source+` (source, since) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
			uuid.Must(uuid.NewV7()).String(), e.o.clock.Now())
		if err == nil {
			err = e.o.db.QueryRowContext(ctx, `SELECT source FROM `+e.et.source).Scan(&e.src)
		}
		if sqlState(err) == undefinedTable {
			return nil, fmt.Errorf("pgbox: export: %w", errNotMigrated)
		}
		if err != nil {
			return nil, fmt.Errorf("pgbox: export: register: %w", err)
		}
	}
	files, err := e.opts.Open(ctx, e.opts.Root)
	if err == nil && files == nil {
		err = errors.New("ExportConfig.Open returned no tables and no error")
	}
	if err != nil {
		return nil, fmt.Errorf("pgbox: export: open %s: %w", e.opts.Root, err)
	}
	// A run of no records puts the tables' schema files in place, as a
	// dispatcher's own root has them, so the documented queries of a
	// table nothing was exported to yet return no rows, not an error.
	if err := files.WriteRun(ctx, e.src, 0, nil); err != nil {
		files.Close()
		return nil, fmt.Errorf("pgbox: export: %w", err)
	}
	e.files = files
	return files, nil
}

// claimed is a batch a claim returned (batch 0: none).
type claimed struct {
	batch           int64
	full, takenOver bool
}

// claim returns a batch to write: one whose exporter's lease expired, or
// a new one holding the rows no batch holds yet (up to BatchRows per
// table), or none. It runs in one transaction under the export lock.
func (e *Exporter) claim(ctx context.Context, spacing time.Duration) (claimed, error) {
	tx, err := e.o.db.BeginTx(ctx, nil)
	if err != nil {
		return claimed{}, fmt.Errorf("pgbox: export: claim: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	c, err := e.claimIn(ctx, tx, spacing)
	if err != nil {
		return claimed{}, fmt.Errorf("pgbox: export: claim: %w", err)
	}
	if c.batch == 0 {
		return c, nil
	}
	if err := tx.Commit(); err != nil {
		return claimed{}, fmt.Errorf("pgbox: export: claim: %w", err)
	}
	return c, nil
}

func (e *Exporter) claimIn(ctx context.Context, tx *sql.Tx, spacing time.Duration) (claimed, error) {
	now := e.o.clock.Now()
	expires := now.Add(e.opts.Lease)
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(`+strconv.Itoa(exportLock)+`, `+e.lock+`)`); err != nil {
		return claimed{}, err
	}
	var c claimed
	err := tx.QueryRowContext(ctx, `UPDATE `+e.et.batches+` SET claimed_by = $1, lease_expires = $2 WHERE batch = (
		SELECT batch FROM `+e.et.batches+` WHERE written_at IS NULL AND lease_expires <= $3 ORDER BY batch LIMIT 1)
		RETURNING batch`, e.id, expires, now).Scan(&c.batch)
	if err == nil {
		c.takenOver = true
		return c, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return claimed{}, err
	}
	if spacing > 0 {
		var last time.Time
		var full bool
		err := tx.QueryRowContext(ctx, `SELECT created_at, full_batch FROM `+e.et.batches+` ORDER BY batch DESC LIMIT 1`).Scan(&last, &full)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return claimed{}, err
		}
		if err == nil && !full && last.After(now.Add(-spacing)) {
			return claimed{}, nil
		}
	}
	// Most passes find nothing: they ask before taking a batch number, so
	// that numbers run without gaps (but after a claim that skipped every
	// row it found, locked by another transaction, and rolled back).
	var any bool
	if err := tx.QueryRowContext(ctx, e.unexported).Scan(&any); err != nil || !any {
		return claimed{}, err
	}
	if err := tx.QueryRowContext(ctx, `INSERT INTO `+e.et.batches+` (claimed_by, lease_expires, created_at) VALUES ($1, $2, $3) RETURNING batch`,
		e.id, expires, now).Scan(&c.batch); err != nil {
		return claimed{}, err
	}
	var rows int64
	for _, tb := range e.o.tables {
		res, err := tx.ExecContext(ctx, `UPDATE `+tb.name+` SET export_batch = $1 WHERE seq IN (
			SELECT seq FROM `+tb.name+` WHERE export_batch IS NULL ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED)`, c.batch, e.opts.BatchRows)
		if err != nil {
			return claimed{}, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return claimed{}, err
		}
		rows += n
		c.full = c.full || n == int64(e.opts.BatchRows)
	}
	if rows == 0 {
		return claimed{}, nil // rolled back: no empty batch
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+e.et.batches+` SET rows = $2, full_batch = $3 WHERE batch = $1`, c.batch, rows, c.full); err != nil {
		return claimed{}, err
	}
	return c, nil
}

// written is what write made of a claimed batch.
type written struct {
	// ok is false when another exporter took the batch over before its
	// files were begun (its lease had expired): that one writes it.
	ok bool
	// rows and refused count the rows written and refused, per table.
	rows, refused [3]int64
	// sample is the first few refused rows.
	sample []RefusedRow
}

// write writes a claimed batch's rows as one run and marks the batch
// written. Rows the exporter will not write (Record.Distrust) leave the
// batch first: they are marked refused, so that the written batch holds
// only rows a file holds.
func (e *Exporter) write(ctx context.Context, files outbox.RunWriter, batch int64) (written, error) {
	var w written
	res, err := e.o.db.ExecContext(ctx, `UPDATE `+e.et.batches+` SET lease_expires = $3 WHERE batch = $1 AND claimed_by = $2 AND written_at IS NULL`,
		batch, e.id, e.o.clock.Now().Add(e.opts.Lease))
	if err != nil {
		return w, fmt.Errorf("pgbox: export: batch %d: renew its lease: %w", batch, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return w, err
	}
	var recs []outbox.Record
	for i, tb := range e.o.tables {
		got, foreign, err := e.batchRows(ctx, tb, batch)
		if err != nil {
			return w, fmt.Errorf("pgbox: export: batch %d: %w", batch, err)
		}
		if w.refused[i], err = e.refuse(ctx, tb, batch, foreign); err != nil {
			return w, fmt.Errorf("pgbox: export: batch %d: %w", batch, err)
		}
		if w.refused[i] > 0 {
			w.sample = append(w.sample, foreign[:min(len(foreign), maxRefusedSample-len(w.sample))]...)
		}
		w.rows[i] = int64(len(got))
		recs = append(recs, got...)
	}
	if err := files.WriteRun(ctx, e.Source(), uint64(batch), recs); err != nil {
		return w, fmt.Errorf("pgbox: export: batch %d: %w", batch, err)
	}
	if _, err := e.o.db.ExecContext(ctx, `UPDATE `+e.et.batches+` SET written_at = $2 WHERE batch = $1 AND written_at IS NULL`,
		batch, e.o.clock.Now()); err != nil {
		return w, fmt.Errorf("pgbox: export: batch %d: written, but not marked so (the next exporter writes it again): %w", batch, err)
	}
	w.ok = true
	return w, nil
}

// batchRows reads the rows of tb that batch holds, in seq order: those a
// dispatcher can have written, and the others (foreign), each with why.
func (e *Exporter) batchRows(ctx context.Context, tb *table, batch int64) (recs []outbox.Record, foreign []RefusedRow, err error) {
	rows, err := e.o.db.QueryContext(ctx, `SELECT `+tb.cols+`, seq FROM `+tb.name+` WHERE export_batch = $1 ORDER BY seq`, batch)
	if err != nil {
		return nil, nil, e.o.readError(tb, err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		r, err := scan(tb, rows, &seq)
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", tb.name, err)
		}
		if why := r.Distrust(); why != "" {
			foreign = append(foreign, RefusedRow{Table: tb.t, Seq: seq, ID: r.ID, Reason: why})
			continue
		}
		recs = append(recs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, e.o.readError(tb, err)
	}
	return recs, foreign, nil
}

// refuse takes the rows foreign out of batch and marks them refused, so
// that no batch holds them (Retain then keeps their IDs) and no claim
// takes them again; it warns, counts them in the metric and returns how
// many it marked (none when another exporter that took the batch over
// marked them first).
func (e *Exporter) refuse(ctx context.Context, tb *table, batch int64, foreign []RefusedRow) (int64, error) {
	if len(foreign) == 0 {
		return 0, nil
	}
	seqs := make([]int64, len(foreign))
	for i, f := range foreign {
		seqs[i] = f.Seq
	}
	list, err := json.Marshal(seqs)
	if err != nil {
		return 0, err
	}
	res, err := e.o.db.ExecContext(ctx, `UPDATE `+tb.name+` SET export_batch = `+strconv.Itoa(refusedBatch)+`
		WHERE export_batch = $1 AND seq IN (SELECT jsonb_array_elements_text($2::jsonb)::bigint)`, batch, string(list))
	if err != nil {
		return 0, fmt.Errorf("mark %d rows of %s refused: %w", len(foreign), tb.name, err)
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return 0, err
	}
	e.refused.Add(ctx, n, metric.WithAttributes(attribute.String("table", string(tb.t))))
	sample := make([]string, 0, maxRefusedSample)
	for _, f := range foreign[:min(len(foreign), maxRefusedSample)] {
		sample = append(sample, f.String())
	}
	e.opts.Logger.Warn("pgbox: export: rows refused: no dispatcher can have written them; they stay in the database, and Retain keeps their IDs, until they are removed on purpose (ctdispatch export refused)",
		"table", tb.name, "batch", batch, "rows", n, "sample", sample)
	return n, nil
}

// releaseTimeout bounds the release of a batch whose write failed.
const releaseTimeout = 5 * time.Second

// release ends this exporter's lease on a batch it failed to write (its
// context ended, Root refused a file), so that the next pass of any
// exporter writes it without waiting for the lease to expire.
func (e *Exporter) release(ctx context.Context, batch int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_, err := e.o.db.ExecContext(ctx, `UPDATE `+e.et.batches+` SET lease_expires = $3 WHERE batch = $1 AND claimed_by = $2 AND written_at IS NULL`,
		batch, e.id, e.o.clock.Now())
	if err != nil {
		return fmt.Errorf("pgbox: export: batch %d: release it (another exporter takes it when its lease expires): %w", batch, err)
	}
	return nil
}
