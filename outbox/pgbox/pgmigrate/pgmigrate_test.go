package pgmigrate_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks/worker"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// roles numbers the roles the tests create: roles are the cluster's.
var roles atomic.Int64

// appRole creates, as the administrator, a role that owns one schema it
// did not make ("jobs") and has no other privilege on a new database, the
// usual set-up of a service's database; it returns a pool connected as
// that role, the administrator's pool, and the names of the role and the
// database.
func appRole(t *testing.T) (app, admin *sql.DB, role, database string) {
	t.Helper()
	dsn := pgtest.New(t)
	admin, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	role = fmt.Sprintf("app_%d_%d", os.Getpid(), roles.Add(1))
	for _, q := range []string{`CREATE ROLE ` + role + ` LOGIN`, `CREATE SCHEMA jobs AUTHORIZATION ` + role} {
		_, err := admin.ExecContext(ctx, q)
		require.NoError(t, err)
	}
	require.NoError(t, admin.QueryRowContext(ctx, `SELECT current_database()`).Scan(&database))
	app, err = sql.Open("pgx", strings.Replace(dsn, "user=postgres", "user="+role, 1))
	require.NoError(t, err)
	t.Cleanup(func() {
		app.Close()
		// The role's objects are in this database only; the database is
		// dropped after this (cleanups run last first).
		_, err := admin.ExecContext(ctx, `DROP OWNED BY `+role)
		require.NoError(t, err)
		_, err = admin.ExecContext(ctx, `DROP ROLE `+role)
		require.NoError(t, err)
	})
	return app, admin, role, database
}

// A role that owns its schema and may not create schemas on the database
// (CREATE SCHEMA IF NOT EXISTS checks that privilege even when the schema
// exists) migrates the outbox and the worker's inbox there, twice; the
// tables are its own. About 2 s.
func TestMigrateAsTheOwnerOfItsSchemaOnly(t *testing.T) {
	t.Parallel()
	app, _, role, database := appRole(t)
	ctx := t.Context()
	_, err := app.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS jobs`)
	require.ErrorContains(t, err, "permission denied for database "+database, "the statement migrate no longer runs on an existing schema")

	for range 2 {
		require.NoError(t, pgbox.Migrate(ctx, app, pgbox.Config{Schema: "jobs"}))
		require.NoError(t, worker.Migrate(ctx, app, worker.SQLConfig{Schema: "jobs"}))
	}
	var owners []string
	rows, err := app.QueryContext(ctx, `SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'jobs'`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var o string
		require.NoError(t, rows.Scan(&o))
		owners = append(owners, o)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{role}, owners)
}

// A migration the role may not run names the statement and the privilege
// it needs: a schema that does not exist (CREATE on the database, or an
// administrator makes it), a schema it may not create in (CREATE on the
// schema), a table another role made (its ownership).
func TestMigrateNamesTheStatementAndThePrivilege(t *testing.T) {
	t.Parallel()
	app, admin, role, database := appRole(t)
	ctx := t.Context()
	for _, q := range []string{`CREATE SCHEMA theirs`, `CREATE SCHEMA shared`, `GRANT USAGE, CREATE ON SCHEMA shared TO ` + role,
		`CREATE TABLE shared.ctdispatch_inbox (id text PRIMARY KEY, status text NOT NULL, detail text, finished_at timestamptz NOT NULL DEFAULT now())`} {
		_, err := admin.ExecContext(ctx, q)
		require.NoError(t, err)
	}
	r, db := `"`+role+`"`, `"`+database+`"`
	for _, c := range []struct {
		name    string
		migrate func() error
		want    string
	}{
		{"outbox, no schema", func() error { return pgbox.Migrate(ctx, app, pgbox.Config{Schema: "mine"}) },
			`pgbox: migrate mine: CREATE SCHEMA IF NOT EXISTS "mine": ERROR: permission denied for database ` + database + ` (SQLSTATE 42501); the role ` + r + ` needs CREATE on database ` + db + ` to make schema "mine" (GRANT CREATE ON DATABASE ` + db + ` TO ` + r + `), or an administrator makes the schema for it first (CREATE SCHEMA "mine" AUTHORIZATION ` + r + `), which migrating then leaves as it is`},
		{"inbox, no schema", func() error { return worker.Migrate(ctx, app, worker.SQLConfig{Schema: "mine"}) },
			`worker: migrate "mine"."ctdispatch_inbox": CREATE SCHEMA IF NOT EXISTS "mine": ERROR: permission denied for database ` + database + ` (SQLSTATE 42501); the role ` + r + ` needs CREATE on database ` + db + ` to make schema "mine" (GRANT CREATE ON DATABASE ` + db + ` TO ` + r + `), or an administrator makes the schema for it first (CREATE SCHEMA "mine" AUTHORIZATION ` + r + `), which migrating then leaves as it is`},
		{"outbox, a schema of another role", func() error { return pgbox.Migrate(ctx, app, pgbox.Config{Schema: "theirs"}) },
			`pgbox: migrate theirs: CREATE TABLE IF NOT EXISTS "theirs"."ctdispatch_dispatch_outbox": ERROR: permission denied for schema theirs (SQLSTATE 42501); the role ` + r + ` needs CREATE on schema "theirs" (GRANT CREATE ON SCHEMA "theirs" TO ` + r + `), or to own it (ALTER SCHEMA "theirs" OWNER TO ` + r + `)`},
		{"inbox, a table of another role", func() error { return worker.Migrate(ctx, app, worker.SQLConfig{Schema: "shared"}) },
			`worker: migrate "shared"."ctdispatch_inbox": COMMENT ON TABLE "shared"."ctdispatch_inbox": ERROR: must be owner of table ctdispatch_inbox (SQLSTATE 42501); the role ` + r + ` needs to own the table the statement names, as the role that made it does (ALTER TABLE … OWNER TO ` + r + `), or the migration runs as that role`},
	} {
		require.EqualError(t, c.migrate(), c.want, c.name)
	}
}
