// Package pgmigrate runs the statements that make a store's tables in
// PostgreSQL: the outbox's (outbox/pgbox) and the worker inbox's
// (cloudtasks/worker). Both are usually migrated by a role that owns its
// schema and nothing else, which an administrator made for it; so the
// schema is created only when it does not exist (CREATE SCHEMA, even with
// IF NOT EXISTS, needs CREATE on the whole database), and a statement the
// role may not run is named in the error with the privilege it needs.
//
// It is public so that both stores (which do not import each other) share
// it; a program migrates through pgbox.Migrate and worker's SQL inbox
// rather than calling it.
package pgmigrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// insufficientPrivilege is the SQLSTATE of a statement the role may not
// run ("permission denied for …", "must be owner of …").
const insufficientPrivilege = "42501"

// Run runs stmts in one transaction on db, after taking the advisory lock
// lock (which serialises concurrent migrations of the same tables: CREATE
// … IF NOT EXISTS is not safe against a concurrent CREATE of the same
// name) and after creating schema if it does not exist. A failed
// statement is a *StatementError.
func Run(ctx context.Context, db *sql.DB, lock int64, schema string, stmts []string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, lock); err != nil {
		return err
	}
	var r role
	var exists bool
	if err := tx.QueryRowContext(ctx, `SELECT current_user, current_database(), EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).
		Scan(&r.name, &r.database, &exists); err != nil {
		return err
	}
	if !exists {
		// IF NOT EXISTS still: another store's migration (under another
		// lock) may make the same schema meanwhile.
		stmts = append([]string{`CREATE SCHEMA IF NOT EXISTS ` + quote(schema)}, stmts...)
	}
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return r.statementError(q, schema, err)
		}
	}
	return tx.Commit()
}

// StatementError is a statement of a migration that failed: Statement
// names it (its first line), and Need, when the role lacked a privilege,
// says which one it needs and how to give it.
type StatementError struct {
	// Statement is the failed statement's first line.
	Statement string
	// Need is the privilege the role lacked, or "".
	Need string
	// Err is the database's error.
	Err error
}

func (e *StatementError) Error() string {
	if e.Need == "" {
		return fmt.Sprintf("%s: %v", e.Statement, e.Err)
	}
	return fmt.Sprintf("%s: %v; %s", e.Statement, e.Err, e.Need)
}

// Unwrap returns the database's error.
func (e *StatementError) Unwrap() error { return e.Err }

// role is who runs a migration, and where.
type role struct{ name, database string }

// statementError names q, the statement that failed with err, and what
// the role needs to run it when it lacked a privilege.
func (r role) statementError(q, schema string, err error) error {
	e := &StatementError{Statement: firstLine(q), Err: err}
	var s interface{ SQLState() string }
	if !errors.As(err, &s) || s.SQLState() != insufficientPrivilege {
		return e
	}
	who, db, sch := quote(r.name), quote(r.database), quote(schema)
	switch {
	case strings.HasPrefix(q, "CREATE SCHEMA"):
		e.Need = fmt.Sprintf("the role %s needs CREATE on database %s to make schema %s (GRANT CREATE ON DATABASE %s TO %s), or an administrator makes the schema for it first (CREATE SCHEMA %s AUTHORIZATION %s), which migrating then leaves as it is",
			who, db, sch, db, who, sch, who)
	case strings.HasPrefix(q, "CREATE TABLE"):
		e.Need = fmt.Sprintf("the role %s needs CREATE on schema %s (GRANT CREATE ON SCHEMA %s TO %s), or to own it (ALTER SCHEMA %s OWNER TO %s)",
			who, sch, sch, who, sch, who)
	default:
		e.Need = fmt.Sprintf("the role %s needs to own the table the statement names, as the role that made it does (ALTER TABLE … OWNER TO %s), or the migration runs as that role", who, who)
	}
	return e
}

// firstLine is the first line of a statement, without a column list's
// opening parenthesis or a comment's text.
func firstLine(q string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(q), "\n")
	if before, _, ok := strings.Cut(line, " IS '"); ok {
		line = before
	}
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), "("))
}

// quote quotes an identifier as PostgreSQL does.
func quote(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
