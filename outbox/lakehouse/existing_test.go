package lakehouse_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/lakehouse"
)

// copyInto copies the files under src into dst.
func copyInto(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o700); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o600)
	}))
}

// dataFiles returns each Parquet file of the root's tables (not under
// _iceberg/) with the SHA-256 of its bytes.
func dataFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && rel == "_iceberg" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".parquet") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		out[filepath.ToSlash(rel)] = hex.EncodeToString(sum[:])
		return nil
	}))
	return out
}

// Time budget: a few seconds. A root written before publication holds
// files of the format before version and the trace columns
// (../parquetbox/testdata/pretrace, create_calls INT32), a file another
// writer made (DuckDB: create_calls INT64, no version) and files this
// store writes now. Enable and Publish register every file as it is, no
// byte changed; iceberg-go's scan holds every row the store's readers
// hold, each ID once at its latest state. Disable then leaves the root as
// it was: no file removed or changed, the same answers.
func TestExistingRootIsPublishedAsItIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	copyInto(t, filepath.Join("..", "parquetbox", "testdata", "pretrace"), dir)
	duck, err := os.ReadFile(filepath.Join("..", "parquetbox", "testdata", "duckdb_small_zstd.parquet"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "dispatch_outbox", "created_date=2026-02-01"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dispatch_outbox", "created_date=2026-02-01", "duckdb_small_zstd.parquet"), duck, 0o600))

	ob, clock := openRoot(t, dir)
	writeDispatches(t, ob, clock, "r1", 3, true)

	// DuckDB's rows have no run_id: they are looked up by ID.
	qs := byRun("old", "r1")
	for i := range 8 {
		qs = append(qs, outbox.Query{Table: outbox.TableDispatch, ID: fmt.Sprintf("dispatch:s%d:t:1", i)})
	}
	files := dataFiles(t, dir)
	require.Len(t, files, len(liveLocations(t, ob, outbox.TableDispatch))+2+3,
		"the dispatch table's live files, pretrace's timer and delivery, each table's _schema file")
	rows := queryRows(t, ob, qs)
	latest := queryLatest(t, ob, qs)
	require.Len(t, latest, 1+3+8)

	cfg := lakehouse.Config{Clock: clock}
	require.NoError(t, lakehouse.Enable(ctx, ob, cfg))
	rep, err := lakehouse.Publish(ctx, ob, cfg)
	require.NoError(t, err)
	for _, tp := range rep.Tables {
		require.Equal(t, lakehouse.Appended, tp.Action, tp.Table)
		tbl := currentTable(t, ob, cfg, tp.Table)
		require.Equal(t, liveLocations(t, ob, tp.Table), snapshotPaths(t, tbl, tbl.CurrentSnapshot()), tp.Table)
	}
	require.Equal(t, files, dataFiles(t, dir), "registered as they are: no file rewritten, added or removed")

	tbl := currentTable(t, ob, cfg, outbox.TableDispatch)
	scanned := scanRows(t, tbl, tbl.CurrentSnapshot().SnapshotID)
	require.Equal(t, rows, scanned)
	require.Equal(t, latest, latestIDs(scanned), "each ID once, at its latest state")
	for _, st := range []outbox.Table{outbox.TableTimers, outbox.TableDeliveries} {
		tbl := currentTable(t, ob, cfg, st)
		require.Len(t, snapshotPaths(t, tbl, tbl.CurrentSnapshot()), 1, "pretrace's file of %s", st)
	}

	require.NoError(t, lakehouse.Disable(ctx, ob))
	_, on, err := lakehouse.Enabled(ctx, ob)
	require.NoError(t, err)
	require.False(t, on)
	require.Equal(t, files, dataFiles(t, dir), "Disable removes and changes no data file")
	require.Equal(t, rows, queryRows(t, ob, qs))
	require.Equal(t, latest, queryLatest(t, ob, qs))
	_, err = lakehouse.Publish(ctx, ob, cfg)
	require.ErrorIs(t, err, lakehouse.ErrNotEnabled)
}
