package worker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ctdispatch/ctdispatch/outbox/pgbox/pgmigrate"
)

// Defaults of SQLConfig.
const (
	// DefaultSchema is the schema of the inbox table.
	DefaultSchema = "public"
	// DefaultTable is the name of the inbox table.
	DefaultTable = "ctdispatch_inbox"
)

// SQLConfig names the inbox table. Both names must be plain lower-case
// identifiers (letters, digits, _; not starting with a digit); the table
// name at most 50 bytes, so its index's name fits PostgreSQL's 63.
type SQLConfig struct {
	// Schema holds the table. Defaults to DefaultSchema; Migrate creates
	// it if needed.
	Schema string
	// Table is the inbox table. Defaults to DefaultTable.
	Table string
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func (c SQLConfig) withDefaults() SQLConfig {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	return c
}

func (c SQLConfig) validate() error {
	for _, f := range []struct {
		field, v string
		max      int
	}{{"Schema", c.Schema, 63}, {"Table", c.Table, 50}} {
		if !identifier.MatchString(f.v) || len(f.v) > f.max {
			return &ConfigError{Field: "SQLConfig." + f.field, Value: strconv.Quote(f.v),
				Rule: fmt.Sprintf("is not a plain identifier; allowed: [a-z_][a-z0-9_]*, at most %d bytes", f.max)}
		}
	}
	return nil
}

// SQLInbox is a transactional inbox in a PostgreSQL table, reached through
// database/sql (any driver that takes $1 placeholders: pgx's stdlib, lib/pq).
//
// Each delivery runs in one transaction: it inserts the key's row, runs the
// handler with the transaction, and commits both together. The row's
// primary key is the lock: a second delivery of a key whose first delivery
// has not committed waits on the row (at most the wait given to Process,
// through lock_timeout), then finds the key done and is acknowledged, or
// finds it free because the first rolled back (or its process died) and
// does the work itself. A row exists only once committed, so a crash
// before the commit leaves nothing behind.
type SQLInbox struct {
	db                         *sql.DB
	table                      string // quoted schema.table
	insert, markFailed, delete string
	cfg                        SQLConfig
}

// NewSQLInbox returns an inbox in db's table cfg.Schema.cfg.Table. Create
// the table with Migrate (or "ctdispatch worker migrate") first.
func NewSQLInbox(db *sql.DB, cfg SQLConfig) (*SQLInbox, error) {
	if db == nil {
		return nil, &ConfigError{Field: "db", Value: "nil", Rule: "is required"}
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := `"` + cfg.Schema + `"."` + cfg.Table + `"`
	return &SQLInbox{
		db: db, cfg: cfg, table: t,
		// set_config runs before the insert meets the row another
		// transaction holds, so the wait for that row is bounded: one round
		// trip instead of a SET LOCAL and the insert.
		insert: `INSERT INTO ` + t + ` (id, status) SELECT $1, 'done' FROM (SELECT set_config('lock_timeout', $2, true)) AS cfg
			ON CONFLICT (id) DO NOTHING RETURNING true`,
		markFailed: `INSERT INTO ` + t + ` (id, status, detail) VALUES ($1, 'failed', $2) ON CONFLICT (id) DO NOTHING`,
		delete: `DELETE FROM ` + t + ` WHERE id IN (SELECT id FROM ` + t + `
			WHERE finished_at < now() - make_interval(secs => $1) LIMIT ` + strconv.Itoa(cleanupBatch) + `)`,
	}, nil
}

// cleanupBatch is how many rows one DELETE of Cleanup removes, so a large
// cleanup does not hold one long transaction.
const cleanupBatch = 10000

// Migrate creates the inbox table that cfg names in db, as
// NewSQLInbox(db, cfg) then Migrate on it does.
func Migrate(ctx context.Context, db *sql.DB, cfg SQLConfig) error {
	inbox, err := NewSQLInbox(db, cfg)
	if err != nil {
		return err
	}
	return inbox.Migrate(ctx)
}

// migrateLock serialises concurrent Migrate calls (CREATE … IF NOT EXISTS
// is not safe against a concurrent CREATE of the same name).
const migrateLock = 7_304_119_220_260_001

// Migrate creates the schema, the table and its index if they do not
// exist. It is idempotent and safe to run from several processes at once.
// A schema that exists is left as it is, so a role that owns its schema
// and may not create others migrates; a statement the role may not run is
// named in the error with the privilege it needs.
func (s *SQLInbox) Migrate(ctx context.Context) error {
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + s.table + ` (
			id          text        PRIMARY KEY,
			status      text        NOT NULL CHECK (status IN ('done', 'failed')),
			detail      text,
			finished_at timestamptz NOT NULL DEFAULT now()
		)`,
		`COMMENT ON TABLE ` + s.table + ` IS 'ctdispatch worker inbox: one row per finished Idempotency-Key (github.com/ctdispatch/ctdispatch/cloudtasks/worker)'`,
		`CREATE INDEX IF NOT EXISTS "` + s.cfg.Table + `_finished_at" ON ` + s.table + ` (finished_at)`,
	}
	if err := pgmigrate.Run(ctx, s.db, migrateLock, s.cfg.Schema, stmts); err != nil {
		return fmt.Errorf("worker: migrate %s: %w", s.table, err)
	}
	return nil
}

// Process implements Inbox; see SQLInbox for the transaction it runs.
func (s *SQLInbox) Process(ctx context.Context, key string, wait time.Duration, work Work) (Outcome, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("worker: inbox begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	var fresh bool
	err = tx.QueryRowContext(ctx, s.insert, key, lockTimeoutSetting(wait)).Scan(&fresh)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return OutcomeDuplicate, nil // committed by an earlier delivery
	case sqlState(err) == lockNotAvailable:
		return "", fmt.Errorf("%w: key %s still held after %s", ErrBusy, key, wait)
	case err != nil:
		return "", fmt.Errorf("worker: inbox insert %s: %w", key, err)
	}
	if err := work(ctx, tx); err != nil {
		if !IsPermanent(err) {
			return "", err
		}
		// The work's writes go; the failure is recorded on its own.
		// Between the two another delivery may take the key and run it:
		// nothing of this one's work remains, so that is one more
		// attempt, not a second effect.
		if rerr := tx.Rollback(); rerr != nil {
			return "", fmt.Errorf("worker: inbox rollback %s: %w", key, rerr)
		}
		if _, merr := s.db.ExecContext(ctx, s.markFailed, key, truncate(err.Error(), maxDetail)); merr != nil {
			return "", fmt.Errorf("worker: inbox mark %s failed: %w", key, merr)
		}
		return OutcomeFailed, nil
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("worker: inbox commit %s: %w", key, err)
	}
	return OutcomeDone, nil
}

// Finished returns the outcome recorded for key (OutcomeDone or
// OutcomeFailed) and whether there is one.
func (s *SQLInbox) Finished(ctx context.Context, key string) (Outcome, bool, error) {
	var status string
	err := s.db.QueryRowContext(ctx, `SELECT status FROM `+s.table+` WHERE id = $1`, key).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("worker: inbox lookup %s: %w", key, err)
	}
	return Outcome(status), true, nil
}

// Cleanup deletes the keys finished more than olderThan ago, which must be
// at least MinRetention, in batches, and returns how many it deleted. Run
// it daily, for example; the age is measured by the database's clock.
func (s *SQLInbox) Cleanup(ctx context.Context, olderThan time.Duration) (int64, error) {
	if err := checkRetention(olderThan); err != nil {
		return 0, err
	}
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, s.delete, olderThan.Seconds())
		if err != nil {
			return total, fmt.Errorf("worker: inbox cleanup %s: %w", s.table, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("worker: inbox cleanup %s: %w", s.table, err)
		}
		total += n
		if n < cleanupBatch {
			return total, nil
		}
	}
}

// lockNotAvailable is PostgreSQL's SQLSTATE for a lock_timeout.
const lockNotAvailable = "55P03"

// sqlState returns the SQLSTATE of a driver error (pgx and lib/pq errors
// have a SQLState method), or "".
func sqlState(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// lockTimeoutSetting is wait as a lock_timeout value, in milliseconds and
// at least 1 (0 would mean no limit).
func lockTimeoutSetting(wait time.Duration) string {
	return strconv.FormatInt(max(wait.Milliseconds(), 1), 10) + "ms"
}

// maxDetail bounds the failure text kept per key.
const maxDetail = 1000

// truncate cuts s to at most n bytes of valid UTF-8 without NUL, which a
// PostgreSQL text column refuses.
func truncate(s string, n int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
