package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/pgserver"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// Each test gets a database of its own: what one writes, another does not
// see.
func TestDatabasesAreSeparate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := Open(t), Open(t)
	_, err := a.ExecContext(ctx, "CREATE TABLE x (v int); INSERT INTO x VALUES (1)")
	require.NoError(t, err)
	var n int
	require.NoError(t, a.QueryRowContext(ctx, "SELECT count(*) FROM x").Scan(&n))
	require.Equal(t, 1, n)
	_, err = b.ExecContext(ctx, "SELECT count(*) FROM x")
	require.ErrorContains(t, err, `relation "x" does not exist`)
}

func TestDropEndsOpenSessions(t *testing.T) {
	t.Parallel()
	Open(t) // starts the cluster, or skips
	c, err := sharedCluster()
	require.NoError(t, err)
	dsn, drop, err := c.CreateDatabase(context.Background())
	require.NoError(t, err)
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Ping())
	require.NoError(t, drop(), "a session left open does not block the drop")
}

func TestMissingPostgreSQLSkipsExceptUnderCI(t *testing.T) {
	t.Parallel()
	missing := &pgserver.MissingError{Glob: "/usr/lib/postgresql/*/bin"}
	tests := []struct {
		err  error
		ci   string
		skip bool
	}{
		{missing, "", true},
		{missing, "false", true},
		{missing, "true", false},
		{errors.New("initdb: exit status 1"), "", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.skip, skippable(tt.err, tt.ci), "%v CI=%q", tt.err, tt.ci)
	}
}
