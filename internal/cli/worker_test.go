package cli

import (
	"database/sql"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
)

// TestMain stops the PostgreSQL cluster that the worker tests start (the
// first call to pgtest.New) once the package's tests are done.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// worker migrate creates the inbox table once and says so; again, it
// finds it there. Time budget: about 3 s (the cluster's start).
func TestWorkerMigrate(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"worker", "migrate", "--dsn", dsn}, 0, "created inbox table \"public\".\"ctdispatch_inbox\"\n", ""},
		{[]string{"worker", "migrate", "--dsn", dsn}, 0, "inbox table \"public\".\"ctdispatch_inbox\" already existed; nothing to do\n", ""},
		{[]string{"worker", "migrate", "--dsn", dsn, "--schema", "jobs", "--table", "inbox"}, 0, "created inbox table \"jobs\".\"inbox\"\n", ""},
		{[]string{"worker", "migrate", "--dsn", dsn, "--table", "Inbox"}, 2, "",
			"ctdispatch: --table \"Inbox\" is not a plain identifier; allowed: [a-z_][a-z0-9_]*, at most 50 bytes\n"},
		{[]string{"worker", "migrate"}, 2, "", "ctdispatch: --dsn is required: a PostgreSQL connection string (postgres://… or key=value)\n"},
	}
	for _, tt := range tests {
		res := run(t, nil, tt.args...)
		require.Equal(t, tt.stderr, res.stderr, tt.args)
		require.Equal(t, tt.stdout, res.stdout, tt.args)
		require.Equal(t, tt.code, res.code, tt.args)
	}
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer db.Close()
	var tables int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_tables WHERE (schemaname, tablename) IN (('public', 'ctdispatch_inbox'), ('jobs', 'inbox'))`).Scan(&tables))
	require.Equal(t, 2, tables)
}
