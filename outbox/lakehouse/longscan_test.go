package lakehouse_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/lakehouse"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// Time budget: a few seconds; time moves only by the injected clock. A
// query plans its scan on snapshot S2; a compaction replaces S2 by S3.
// While S2 has been superseded for less than the grace, publications
// expire the older S1 but keep every file S2 names, so the query reads
// all of them and gets S2's rows. Once S2 has been superseded for longer
// than the grace it expires, the files only it named (the compaction's
// inputs) are removed, and the store's readers answer as before.
func TestLongScanAcrossSnapshotExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	ob, clock := openRoot(t, dir)
	cfg := lakehouse.Config{Grace: time.Hour, Clock: clock}
	require.NoError(t, lakehouse.Enable(ctx, ob, cfg))

	writeDispatches(t, ob, clock, "r1", 6, true)
	_, err := lakehouse.Publish(ctx, ob, cfg) // S1
	require.NoError(t, err)
	clock.Advance(30 * time.Minute)
	writeDispatches(t, ob, clock, "r2", 4, true)
	_, err = lakehouse.Publish(ctx, ob, cfg) // S2, S1 superseded at t0+30m
	require.NoError(t, err)

	// The query starts: it plans S2's files and holds the plan.
	tbl := currentTable(t, ob, cfg, outbox.TableDispatch)
	s2 := tbl.CurrentSnapshot().SnapshotID
	scan := tbl.Scan(table.WithSnapshotID(s2))
	tasks, err := scan.PlanFiles(ctx)
	require.NoError(t, err)
	s2Files := planPaths(tasks)
	require.Equal(t, liveLocations(t, ob, outbox.TableDispatch), s2Files)
	s2Rows := storeRows(t, ob, "r1", "r2")
	answers := storeLatest(t, ob, "r1", "r2")

	clock.Advance(30 * time.Minute)
	require.NoError(t, ob.Compact(ctx, parquetbox.CompactConfig{Full: true}))
	rep, err := lakehouse.Publish(ctx, ob, cfg) // S3, S2 superseded at t0+60m
	require.NoError(t, err)
	require.Equal(t, lakehouse.Replaced, rep.Tables[0].Action)
	require.Zero(t, rep.Tables[0].Expired)
	require.NotEqual(t, s2Files, liveLocations(t, ob, outbox.TableDispatch), "the compaction replaced S2's files")

	clock.Advance(time.Hour - time.Minute) // S1 superseded 89m ago, S2 59m ago
	rep, err = lakehouse.Publish(ctx, ob, cfg)
	require.NoError(t, err)
	require.Equal(t, lakehouse.Current, rep.Tables[0].Action)
	require.Equal(t, 1, rep.Tables[0].Expired, "S1, superseded longer than the grace ago")
	require.Empty(t, rep.Tables[0].Deleted, "S2, within the grace, still names every file S1 named")

	// The query reads every file of its plan now.
	for _, f := range s2Files {
		_, err := os.Stat(localPath(f))
		require.NoError(t, err, "a file of the held snapshot is still there: %s", f)
	}
	_, batches, err := scan.ReadTasks(ctx, tasks)
	require.NoError(t, err)
	require.Equal(t, s2Rows, collectRows(t, batches), "the query reads S2's rows in full")

	clock.Advance(2 * time.Minute) // S2 superseded 61m ago
	rep, err = lakehouse.Publish(ctx, ob, cfg)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Tables[0].Expired, "S2")
	live := liveLocations(t, ob, outbox.TableDispatch)
	var removed []string
	for _, f := range s2Files {
		if !slices.Contains(live, f) {
			removed = append(removed, strings.TrimPrefix(f, "file://"+filepath.ToSlash(filepath.Join(dir, "dispatch_outbox"))+"/"))
		}
	}
	require.NotEmpty(t, removed)
	require.ElementsMatch(t, removed, rep.Tables[0].Deleted, "exactly the files only S2 named")
	for _, name := range removed {
		_, err := os.Stat(filepath.Join(dir, "dispatch_outbox", name))
		require.ErrorIs(t, err, fs.ErrNotExist, name)
	}
	replaced, err := ob.ReplacedFiles(ctx, outbox.TableDispatch)
	require.NoError(t, err)
	require.Empty(t, replaced)

	require.Equal(t, answers, storeLatest(t, ob, "r1", "r2"), "the store's readers answer as before")
	cur := currentTable(t, ob, cfg, outbox.TableDispatch)
	require.Len(t, cur.Metadata().Snapshots(), 1, "S3 alone")
	require.Equal(t, storeRows(t, ob, "r1", "r2"), scanRows(t, cur, cur.CurrentSnapshot().SnapshotID))
}
