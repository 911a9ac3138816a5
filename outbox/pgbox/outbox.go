package pgbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Outbox is an outbox.Outbox in three PostgreSQL tables, reached through
// database/sql. Every method runs on the database it is given, so give it
// the primary's: reads are then linearizable with every write of every
// process. Its methods are safe for concurrent use.
type Outbox struct {
	db        *sql.DB
	opts      Config
	clock     clockwork.Clock
	processor string
	tables    [3]*table // in the order of outbox.Tables
	batchStmt map[outbox.Table]string
	bulk      map[outbox.Table]bulkStatements
	// batchDropStmt are the batch statements that also drop intents
	// (AppendOutcome), of the tables with intents.
	batchDropStmt map[outbox.Table]string
	// appendIntent and appendIntentNotify are AppendIntent's statements
	// (intentStatement), of the tables with intents.
	appendIntent, appendIntentNotify map[outbox.Table]string
	// reserveIntent and reserveIntentNotify are ReserveIntent's.
	reserveIntent, reserveIntentNotify map[outbox.Table]string
	w                                  writer
	intents                            intents
	// lostClaims are the expiries of this outbox's ClaimIntents whose
	// answer did not arrive: see ClaimIntents.
	lostClaims lostClaims

	// export runs Config.Export's exporter until Close.
	export     *Exporter
	stopExport context.CancelFunc
	exportDone chan struct{}
	closeOnce  sync.Once
	closeErr   error
}

// New returns an outbox in db's tables that opts name, whose records name
// a new UUIDv7 as their processor. db may use any driver that takes $1
// placeholders (pgx's stdlib: sql.Open("pgx", url)). Create the tables
// with Migrate (or "ctdispatch migrate --outbox postgres://…") first. db
// stays the caller's: the outbox never closes it. Size its pool for the
// dispatcher's concurrency: every Append and read holds a connection for
// one statement, and database/sql keeps only two idle by default, so
// without db.SetMaxIdleConns a busy dispatcher opens a new server process
// for most statements.
func New(db *sql.DB, opts Config) (*Outbox, error) {
	if db == nil {
		return nil, &ConfigError{Field: "db", Value: "nil", Rule: "is required"}
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	o := &Outbox{db: db, opts: opts, clock: opts.Clock, processor: uuid.Must(uuid.NewV7()).String(), intents: newIntents(opts)}
	o.batchStmt = make(map[outbox.Table]string, len(o.tables))
	o.bulk = make(map[outbox.Table]bulkStatements, len(o.tables))
	o.batchDropStmt = make(map[outbox.Table]string, len(o.tables))
	o.appendIntent, o.appendIntentNotify = make(map[outbox.Table]string), make(map[outbox.Table]string)
	o.reserveIntent, o.reserveIntentNotify = make(map[outbox.Table]string), make(map[outbox.Table]string)
	for i, t := range outbox.Tables() {
		o.tables[i] = newTable(opts, t)
		o.batchStmt[t] = batchStatement(o.tables[i], "")
		o.bulk[t] = newBulkStatements(o.tables[i], o.intents)
		if o.tables[i].claims {
			o.batchDropStmt[t] = batchStatement(o.tables[i], batchDrops(o.intents))
			o.appendIntent[t] = intentStatement(o.tables[i], o.tables[i].insert, o.intents, false)
			o.appendIntentNotify[t] = intentStatement(o.tables[i], o.tables[i].insert, o.intents, true)
			o.reserveIntent[t] = intentStatement(o.tables[i], o.tables[i].reserve, o.intents, false)
			o.reserveIntentNotify[t] = intentStatement(o.tables[i], o.tables[i].reserve, o.intents, true)
		}
	}
	if opts.Export.set() {
		e, err := NewExporter(o, opts.Export)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		o.export, o.stopExport, o.exportDone = e, cancel, make(chan struct{})
		go func() {
			defer close(o.exportDone)
			e.Run(ctx) //nolint:errcheck // Run logs its failures and returns nil
		}()
	}
	return o, nil
}

// Close stops the exporter that Config.Export runs, if any, and waits for
// its pass under way; it does not close the database. Without an
// exporter there is nothing to close. Call it after the dispatcher's
// Close, whose Flush exports what is left.
func (o *Outbox) Close() error {
	o.closeOnce.Do(func() {
		if o.export == nil {
			return
		}
		o.stopExport()
		<-o.exportDone
		o.closeErr = o.export.Close()
	})
	return o.closeErr
}

// table returns the layout of t, or an error naming it when it is not a
// table.
func (o *Outbox) table(t outbox.Table) (*table, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	for _, tb := range o.tables {
		if tb.t == t {
			return tb, nil
		}
	}
	panic("pgbox: table " + string(t) + " has no layout") // Validate knows only the three
}

// ProcessorUUID returns the UUID the records are written under.
func (o *Outbox) ProcessorUUID() string { return o.processor }

// Append checks r and fills it in as Record.Prepare does, then inserts it
// in one statement, which commits before Append returns; done (when not
// nil) is then called with nil before Append returns. Concurrent appends
// share their statement and its commit (see the package's "Round trips").
// Every error is returned instead of passed to done. A record whose Version is above 0 is
// inserted only if no record of its ID has that Version or a higher one:
// otherwise Append returns a *outbox.VersionConflictError holding the
// newest record. UpdatedAt is nudged past the ID's latest, so it strictly
// increases per ID. An error from the database itself (a connection lost
// while committing) cannot say whether the record was kept: read Latest.
func (o *Outbox) Append(ctx context.Context, r outbox.Record, done func(error)) error {
	return o.appendRecord(ctx, r, done, false, nil)
}

// appendRecord is Append; when first, r is refused if the ID has any
// record at all (Reserve).
func (o *Outbox) appendRecord(ctx context.Context, r outbox.Record, done func(error), first bool, drop *outbox.Intent) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tb, err := o.table(r.Table)
	if err != nil {
		return err
	}
	if err := r.Prepare(o.processor, o.clock.Now()); err != nil {
		return err
	}
	if r.Version < 0 {
		return &outbox.RecordError{ID: r.ID, Field: "Version", Value: fmt.Sprint(r.Version), Rule: "is negative; allowed: 0 (unconditional) or above"}
	}
	w, err := o.write(ctx, tb, &r, first, drop)
	if err != nil {
		return err
	}
	if !w.kept {
		return o.refused(ctx, &r, w.current)
	}
	if done != nil {
		done(nil)
	}
	return nil
}

// conflict reads the record that won over r and returns the conflict.
func (o *Outbox) conflict(ctx context.Context, r *outbox.Record) error {
	cur, ok, err := o.Latest(ctx, r.Table, r.ID)
	if err != nil {
		return fmt.Errorf("pgbox: append %s %s: version %d refused; reading the winner: %w", r.Table, r.ID, r.Version, err)
	}
	if !ok {
		return fmt.Errorf("pgbox: append %s %s: version %d refused, but no record of the ID is left to read (removed by Retain?)", r.Table, r.ID, r.Version)
	}
	return &outbox.VersionConflictError{Table: r.Table, ID: r.ID, Version: r.Version, Current: cur}
}

// insertArgs are the values of tb.insert, in the order of its columns.
func insertArgs(r *outbox.Record) []any {
	args := []any{r.ID, r.Version, r.CloudTaskID, r.Queue, r.RunID, r.TaskKey, r.Attempt, r.Kind, string(r.Status), r.ErrorCode,
		r.CreateCalls, r.PayloadSHA256, r.ProcessorUUID, r.CreatedAt, r.UpdatedAt, nullTime(r)}
	if r.Table == outbox.TableDeliveries {
		d := &r.Delivery
		args = append(args, d.RetryCount, d.ExecutionCount, d.HTTPStatus, d.Latency.Microseconds())
	}
	return append(args, sql.NullString{String: r.TraceID, Valid: r.TraceID != ""}, sql.NullString{String: r.SpanID, Valid: r.SpanID != ""})
}

func nullTime(r *outbox.Record) sql.NullTime {
	return sql.NullTime{Time: r.DueAt, Valid: !r.DueAt.IsZero()}
}

// Flush returns at once when the outbox runs no exporter: every record is
// committed when Append returns. With Config.Export it exports what is
// committed and not yet exported, so that a dispatcher's Close leaves its
// records in the Parquet tables too.
func (o *Outbox) Flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil || o.export == nil {
		return err
	}
	_, err := o.export.ExportOnce(ctx)
	return err
}

// errNotMigrated is wrapped into a read or write on a table that does not
// exist, with the command that creates it.
var errNotMigrated = errors.New(`the outbox tables do not exist; create them with "ctdispatch migrate --outbox postgres://…" or pgbox.Migrate`)
