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

// worker cleanup deletes the keys finished more than --older-than ago and
// keeps the rest; an age under 31 days is refused before connecting.
// Time budget: about 3 s (shares the cluster).
func TestWorkerCleanup(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	res := run(t, nil, "worker", "migrate", "--dsn", dsn)
	require.Equal(t, 0, res.code, res.stderr)
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`INSERT INTO ctdispatch_inbox (id, status, finished_at) VALUES
		('dispatch:r:old:1', 'done', now() - interval '40 days'),
		('dispatch:r:older:1', 'failed', now() - interval '90 days'),
		('dispatch:r:recent:1', 'done', now() - interval '30 days'),
		('dispatch:r:new:1', 'done', now())`)
	require.NoError(t, err)

	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"worker", "cleanup", "--dsn", dsn, "--older-than", "720h"}, 2, "",
			"ctdispatch: --older-than 720h0m0s is below 744h (31 days, worker.MinRetention): a task can still deliver its key until then\n"},
		{[]string{"worker", "cleanup"}, 2, "", "ctdispatch: --dsn is required: a PostgreSQL connection string (postgres://… or key=value)\n"},
		{[]string{"worker", "cleanup", "--dsn", dsn, "--older-than", "1440h"}, 0,
			"deleted 1 keys finished more than 1440h0m0s ago from \"public\".\"ctdispatch_inbox\"\n", ""},
		{[]string{"worker", "cleanup", "--dsn", dsn}, 0,
			"deleted 1 keys finished more than 744h0m0s ago from \"public\".\"ctdispatch_inbox\"\n", ""},
	}
	for _, tt := range tests {
		res := run(t, nil, tt.args...)
		require.Equal(t, tt.stderr, res.stderr, tt.args)
		require.Equal(t, tt.stdout, res.stdout, tt.args)
		require.Equal(t, tt.code, res.code, tt.args)
	}
	var left []string
	rows, err := db.Query(`SELECT id FROM ctdispatch_inbox ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		left = append(left, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"dispatch:r:new:1", "dispatch:r:recent:1"}, left)
}
