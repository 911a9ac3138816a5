package parquetbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctdispatch/ctdispatch/internal/testtools/duckdbtest"
	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/stretchr/testify/require"
)

// schemaFile opens table t's schema file under root and returns its row
// count and whether it has the table's current columns.
func schemaFile(t *testing.T, root string, table outbox.Table) (rows int64, current bool) {
	t.Helper()
	p := filepath.Join(root, string(table), filepath.FromSlash(schemaFileName))
	f, err := os.Open(p)
	require.NoError(t, err)
	st, err := f.Stat()
	require.NoError(t, err)
	pf, err := openParquet(p, table, f, st.Size())
	require.NoError(t, err)
	defer pf.close()
	return pf.NumRows(), pf.HasSchemaOf(string(table))
}

// An outbox opened for writing holds, in every table, a schema file with
// no rows that this package's reads, stats and compaction pass over; a
// schema file from before a column was added is written again, a current
// one is left as it is.
func TestSchemaFileIsInEveryTableAndCountsAsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	stale := filepath.Join(b.root, string(outbox.TableTimers), filepath.FromSlash(schemaFileName))
	require.NoError(t, os.MkdirAll(filepath.Dir(stale), 0o700))
	old, err := os.ReadFile(filepath.Join("testdata", "pretrace", "timers", "created_date=2026-03-01", procA+"-0000000000000000.parquet"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(stale, old, 0o600))

	o := b.open(t, procA)
	for _, table := range outbox.Tables() {
		rows, current := schemaFile(t, b.root, table)
		require.Equal(t, int64(0), rows, table)
		require.True(t, current, "%s: the table's current columns", table)
	}
	stats, err := o.Stats(ctx)
	require.NoError(t, err)
	for _, st := range stats {
		require.True(t, st.Absent(), "%s: %+v", st.Table, st)
	}
	cs, err := o.compact(ctx, CompactConfig{Full: true})
	require.NoError(t, err)
	for _, tc := range cs.Tables {
		require.Zero(t, tc.FilesIn, tc.Table)
		require.Empty(t, tc.Partitions, tc.Table)
	}
	require.Empty(t, o.Damaged())
	require.NoError(t, o.Close())

	before, err := os.Stat(stale)
	require.NoError(t, err)
	b.open(t, procA)
	after, err := os.Stat(stale)
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after), "a current schema file is not written again")
}

// docsSQL returns the DuckDB statements of docs/outbox.md (see package
// duckdbtest).
var docsSQL = duckdbtest.DocsStatements

// Every DuckDB query of docs/outbox.md returns no rows, rather than
// failing for want of files, on outboxes just opened: nothing dispatched,
// nothing delivered.
func TestDuckDBDocsQueriesOnAFreshOutboxReturnNoRows(t *testing.T) {
	t.Parallel()
	root, workerRoot := t.TempDir(), t.TempDir()
	for _, dir := range []string{root, workerRoot} {
		o, err := Open(context.Background(), Config{Root: dir})
		require.NoError(t, err)
		require.NoError(t, o.Close())
	}
	stmts := docsSQL(t, root, workerRoot)
	require.Len(t, stmts, 8, "docs/outbox.md's DuckDB statements")
	got := duckDB(t, stmts...)
	want := make([]string, len(stmts))
	for i := range want {
		want[i] = "[]"
	}
	require.Equal(t, want, got)
}
