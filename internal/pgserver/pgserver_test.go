package pgserver

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMissingErrorSaysHowToInstall(t *testing.T) {
	t.Parallel()
	require.EqualError(t, &MissingError{Glob: binGlob},
		"needs postgresql: no initdb under /usr/lib/postgresql/*/bin; install it with: apt-get install postgresql")
}

// A directory left by a test binary that died is removed by the next
// start; one whose owner lives is kept.
func TestAbandonedDirectoriesAreRemoved(t *testing.T) {
	t.Parallel()
	abandoned, err := os.MkdirTemp("", dirPrefix)
	require.NoError(t, err)
	f, err := own(abandoned)
	require.NoError(t, err)
	require.NoError(t, f.Close()) // as the kernel does when the owner dies
	alive, err := os.MkdirTemp("", dirPrefix)
	require.NoError(t, err)
	owner, err := own(alive)
	require.NoError(t, err)
	t.Cleanup(func() { owner.Close(); os.RemoveAll(alive) })

	removeAbandoned()
	require.NoDirExists(t, abandoned)
	require.DirExists(t, alive)
}

// A restart in immediate mode keeps every committed row, kills the
// sessions open before it, and accepts new ones once it returns.
func TestRestartKeepsCommittedRowsAndDropsOldSessions(t *testing.T) {
	t.Parallel()
	c, err := Start()
	if missing := (*MissingError)(nil); errors.As(err, &missing) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Stop()) })
	ctx := context.Background()
	dsn, drop, err := c.CreateDatabase(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, drop()) })
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.ExecContext(ctx, `CREATE TABLE rows (n int PRIMARY KEY)`)
	require.NoError(t, err)
	// The last commit comes just before the crash: an asynchronous commit
	// would still be in the server's memory.
	for n := range 100 {
		_, err = db.ExecContext(ctx, `INSERT INTO rows VALUES ($1)`, n)
		require.NoError(t, err)
	}
	before, err := db.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { before.Close() })
	require.NoError(t, before.PingContext(ctx))

	require.NoError(t, c.Restart(ctx))

	_, err = before.ExecContext(ctx, `SELECT 1`)
	require.Error(t, err, "a session from before the restart")
	var count, sum int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*), sum(n) FROM rows`).Scan(&count, &sum))
	require.Equal(t, 100, count)
	require.Equal(t, 4950, sum)
	_, err = db.ExecContext(ctx, `INSERT INTO rows VALUES (100)`)
	require.NoError(t, err, "a new session after the restart")
}
