package cli

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// The query parameters of a postgres:// --outbox that name its tables
// (pgbox.Config); they are taken out before the URL reaches the driver,
// which would send them to the server as settings.
const (
	schemaParam = "ctdispatch_schema"
	prefixParam = "ctdispatch_table_prefix"
)

// isPostgresURL reports whether an --outbox names a PostgreSQL database
// (package outbox/pgbox) rather than a directory or a bucket.
func isPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// postgresOptions splits a postgres:// --outbox into the URL the driver
// gets and the table names its ctdispatch_ parameters give.
func postgresOptions(raw string) (string, pgbox.Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", pgbox.Config{}, usagef("--outbox %s is not a valid URL: %s", redact(raw), urlReason(err))
	}
	q := u.Query()
	for _, p := range []string{schemaParam, prefixParam} {
		if len(q[p]) > 1 {
			return "", pgbox.Config{}, usagef("--outbox: %s is given %d times; give it once", p, len(q[p]))
		}
	}
	opts := pgbox.Config{Schema: q.Get(schemaParam), TablePrefix: q.Get(prefixParam)}
	q.Del(schemaParam)
	q.Del(prefixParam)
	u.RawQuery = q.Encode()
	return u.String(), opts, nil
}

// maxIdleConns is how many connections a command keeps open between
// statements: two per caller at dispatch's usual largest --concurrency
// (64), since an overlapped dispatch writes its outcome after its caller
// has gone on.
const maxIdleConns = 128

// openPostgres connects to the database a postgres:// --outbox names and
// returns its outbox and the pool, which the caller closes. A database
// that cannot be reached, or whose tables "ctdispatch migrate" has not
// made, is an error at once, not at the first record.
func openPostgres(ctx context.Context, raw string) (*pgbox.Outbox, *sql.DB, error) {
	return openPostgresExporting(ctx, raw, pgbox.ExportConfig{})
}

// openPostgresExporting is openPostgres for an outbox that runs export
// (none when it is zero) until its Close.
func openPostgresExporting(ctx context.Context, raw string, export pgbox.ExportConfig) (*pgbox.Outbox, *sql.DB, error) {
	box, db, err := connectPostgres(ctx, raw, export)
	if err != nil {
		return nil, nil, err
	}
	if err := box.Check(ctx); err != nil {
		box.Close()
		db.Close()
		return nil, nil, fmt.Errorf("outbox %s: %w", redact(raw), err)
	}
	return box, db, nil
}

// connectPostgres is openPostgresExporting without the check of the
// tables, for migrate, which makes them.
func connectPostgres(ctx context.Context, raw string, export pgbox.ExportConfig) (*pgbox.Outbox, *sql.DB, error) {
	dsn, opts, err := postgresOptions(raw)
	if err != nil {
		return nil, nil, err
	}
	opts.Export = export
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, nil, asUsage(fmt.Errorf("--outbox %s: %w", redact(raw), err))
	}
	// Concurrent dispatches each keep their connection (database/sql keeps
	// two idle by default, and a new PostgreSQL connection is a new server
	// process).
	db.SetMaxIdleConns(maxIdleConns)
	box, err := pgbox.New(db, opts)
	if err != nil {
		db.Close()
		if ce, ok := err.(*pgbox.ConfigError); ok {
			param := map[string]string{"Config.Schema": schemaParam, "Config.TablePrefix": prefixParam}[ce.Field]
			return nil, nil, usagef("--outbox: %s=%s %s", param, strings.Trim(ce.Value, `"`), ce.Rule)
		}
		return nil, nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		box.Close()
		db.Close()
		return nil, nil, fmt.Errorf("outbox: cannot reach PostgreSQL: %w", err)
	}
	return box, db, nil
}

// readOutbox is an outbox opened for reading (query): its records, the
// files it skipped (a database skips none) and how to close it.
type readOutbox struct {
	outbox.Outbox
	skipped func() []*parquetbox.FileError
	close   func() error
}

// openReadOutbox opens an existing outbox to read: a postgres:// URL, or
// what openOutbox opens.
func openReadOutbox(ctx context.Context, env *Env, where string) (*readOutbox, error) {
	if isPostgresURL(where) {
		box, db, err := openPostgres(ctx, where)
		if err != nil {
			return nil, err
		}
		return &readOutbox{Outbox: box, skipped: func() []*parquetbox.FileError { return nil }, close: db.Close}, nil
	}
	o, err := openOutbox(ctx, env, where, true)
	if err != nil {
		return nil, err
	}
	return &readOutbox{Outbox: o, skipped: o.Damaged, close: o.Close}, nil
}

// notForPostgres refuses a postgres:// --outbox in a command that works on
// Parquet files only, saying what to use instead.
func notForPostgres(command, where, instead string) error {
	if !isPostgresURL(where) {
		return nil
	}
	return usagef("%s works on a file or bucket outbox; --outbox %s is a PostgreSQL database: %s", command, redact(where), instead)
}
