// Package pgtest hands each test a fresh database in a throwaway
// PostgreSQL cluster (internal/pgserver) shared by the test binary: the
// first call to New starts the cluster, and Main stops it and removes its
// files when the tests are done.
//
// Where PostgreSQL is not installed, New skips the test with a message
// saying how to install it; when the environment variable CI is "true" it
// fails the test instead, so CI never passes by skipping.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/pgserver"
)

var (
	shared     *pgserver.Cluster
	sharedErr  error
	sharedOnce sync.Once
)

// New returns a DSN (for the "pgx" database/sql driver) naming a new, empty
// database in the package's cluster, starting the cluster on first use.
// The database is dropped when the test ends. Without PostgreSQL the test
// is skipped, or fails under CI=true.
func New(t testing.TB) string {
	t.Helper()
	c, err := sharedCluster()
	if err != nil {
		if skippable(err, os.Getenv("CI")) {
			t.Skip(err.Error())
		}
		t.Fatalf("pgtest: %v", err)
	}
	dsn, drop, err := c.CreateDatabase(context.Background())
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return dsn
}

// Database is New for an Example function, which has no testing.TB to
// skip or clean up with: it returns a DSN naming a new, empty database in
// the package's cluster and a function that drops it, or the error that
// kept the cluster from starting (PostgreSQL not installed, say).
func Database() (dsn string, drop func() error, err error) {
	c, err := sharedCluster()
	if err != nil {
		return "", nil, err
	}
	return c.CreateDatabase(context.Background())
}

// skippable reports whether a start failure skips the test: only a
// missing installation, and never under CI=true, where it must fail.
func skippable(err error, ci string) bool {
	var missing *pgserver.MissingError
	return errors.As(err, &missing) && ci != "true"
}

// OwnCluster starts a cluster of the test's own, for a test that crashes
// or restarts it, and stops it when the test ends. A missing PostgreSQL
// installation skips the test as New does.
func OwnCluster(t testing.TB) *pgserver.Cluster {
	t.Helper()
	c, err := pgserver.Start()
	if skippable(err, os.Getenv("CI")) {
		t.Skip(err.Error())
	}
	require.NoError(t, err)
	t.Cleanup(func() { c.Stop() })
	return c
}

// sharedCluster starts the package's cluster on first use.
func sharedCluster() (*pgserver.Cluster, error) {
	sharedOnce.Do(func() { shared, sharedErr = pgserver.Start() })
	return shared, sharedErr
}

// Open is New followed by sql.Open, with the pool closed when the test ends.
func Open(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", New(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Main runs the tests of a package that uses New and stops the cluster
// afterwards: func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}
