package parquetbox

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// WriteRun writes another store's records as a run in the layout a log
// conversion writes, keeping their processor, times and version; writing
// it again writes the same bytes; a bad source or record writes nothing.
func TestWriteRunWritesAnotherStoresRecordsAsARun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o, err := Open(t.Context(), Config{Root: b.root, ReadOnly: true, Buckets: 1, Clock: b.clock})
	require.NoError(t, err)
	t.Cleanup(func() { o.Close() })
	pending := dispatchRec("run", "a", "1", outbox.StatusPending)
	pending.ProcessorUUID, pending.Version, pending.CreatedAt, pending.UpdatedAt = procB, 1, t0, t0
	created := pending
	created.Status, created.Version, created.UpdatedAt = outbox.StatusCreated, 2, t0.Add(time.Second)
	recs := []outbox.Record{created, pending}

	require.NoError(t, o.WriteRun(t.Context(), "src_1", 7, recs))
	path := filepath.Join(b.root, "dispatch_outbox", "created_date=2026-03-01", "src_1-0000000000000007.parquet")
	first, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, o.WriteRun(t.Context(), "src_1", 7, recs))
	again, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, first, again)
	got, err := o.Lookup(t.Context(), outbox.Query{RunID: "run", History: true})
	require.NoError(t, err)
	pending.Normalize()
	created.Normalize()
	require.Equal(t, []outbox.Record{pending, created}, got)

	require.ErrorContains(t, o.WriteRun(t.Context(), "../x", 8, recs), `run source "../x" is not a UUID or a name of [0-9a-z_]`)
	bad := pending
	bad.CloudTaskID = "d_0000000000000000000000000a"
	require.ErrorIs(t, o.WriteRun(t.Context(), "src_1", 8, []outbox.Record{pending, bad}), outbox.ErrForeignRecord)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "the refused runs wrote nothing")
}

// On a read-only outbox, the first WriteRun puts every table's schema
// file in place, as Open does for a writer, so a tree written only by
// runs has them too; a run of no records writes nothing else.
func TestWriteRunPutsTheSchemaFilesInPlace(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	o, err := Open(t.Context(), Config{Root: root, ReadOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { o.Close() })
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Empty(t, entries, "opening read-only writes nothing")

	require.NoError(t, o.WriteRun(t.Context(), "src_1", 0, nil))
	var got []string
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			got = append(got, filepath.ToSlash(rel))
		}
		return err
	}))
	require.Equal(t, []string{
		"deliveries/" + schemaFileName,
		"dispatch_outbox/" + schemaFileName,
		"timers/" + schemaFileName,
	}, got)
	for _, table := range outbox.Tables() {
		rows, current := schemaFile(t, root, table)
		require.Equal(t, int64(0), rows, table)
		require.True(t, current, table)
	}
}
