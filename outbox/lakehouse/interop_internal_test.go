package lakehouse

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

func appendDispatches(t *testing.T, ob *parquetbox.Outbox, run string, n int, status outbox.Status) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		id, _ := naming.NewDispatch(run, "extract", naming.Attempt(uint64(i+1)))
		rec := outbox.Record{Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(),
			Queue: "projects/p/locations/l/queues/q", RunID: id.RunID(), TaskKey: id.TaskKey(), Attempt: id.Attempt(), Status: status}
		if status != outbox.StatusPending {
			prev, ok, err := ob.Latest(ctx, outbox.TableDispatch, rec.ID)
			require.NoError(t, err)
			require.True(t, ok)
			rec.Follow(&prev, time.Now())
			rec.CreateCalls = 1
		}
		require.NoError(t, outbox.AppendAndWait(ctx, ob, rec))
	}
	require.NoError(t, ob.Flush(ctx))
}

// currentFiles returns the paths the table's current snapshot names.
func currentFiles(t *testing.T, dir string, tb outbox.Table) []string {
	t.Helper()
	ctx := context.Background()
	lc, err := openCatalog(ctx, dir, Config{}.WithDefaults())
	require.NoError(t, err)
	defer lc.close()
	tbl, err := lc.load(ctx, tb)
	require.NoError(t, err)
	fsys, err := tbl.FS(ctx)
	require.NoError(t, err)
	files, err := snapshotFiles(fsys, tbl.CurrentSnapshot())
	require.NoError(t, err)
	sort.Strings(files)
	return files
}

func livePaths(t *testing.T, src source, tb outbox.Table) []string {
	t.Helper()
	live, err := src.liveFiles(context.Background(), tb)
	require.NoError(t, err)
	var out []string
	for _, f := range live {
		out = append(out, f.location)
	}
	sort.Strings(out)
	return out
}

// Time budget: a few seconds. Appends are registered by one append
// snapshot, a replayed publication adds nothing, a compaction becomes one
// replace snapshot, and once the replaced snapshot is older than the grace
// it expires and the files only it named are removed.
func TestPublishAppendsReplacesAndExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	clock := clockwork.NewFakeClockAt(time.Now())
	ob, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ProcessorUUID: uuid.New(), Clock: clock})
	require.NoError(t, err)
	defer ob.Close()
	require.NoError(t, Enable(ctx, ob, Config{}))
	src := outboxSource{ob}
	cfg := Config{Clock: clock}

	appendDispatches(t, ob, "r1", 20, outbox.StatusPending)
	appendDispatches(t, ob, "r1", 20, outbox.StatusCreated)
	rep, err := publish(ctx, src, cfg)
	require.NoError(t, err)
	first := rep.Tables[0]
	require.Equal(t, Appended, first.Action)
	require.Equal(t, len(livePaths(t, src, outbox.TableDispatch)), first.Added)
	require.Equal(t, livePaths(t, src, outbox.TableDispatch), currentFiles(t, dir, outbox.TableDispatch))

	rep, err = publish(ctx, src, cfg)
	require.NoError(t, err)
	require.Equal(t, Current, rep.Tables[0].Action, "a replay registers nothing")
	require.Equal(t, first.SnapshotID, rep.Tables[0].SnapshotID)

	before := currentFiles(t, dir, outbox.TableDispatch)
	require.NoError(t, ob.Compact(ctx, parquetbox.CompactConfig{Full: true}))
	rep, err = publish(ctx, src, cfg)
	require.NoError(t, err)
	require.Equal(t, Replaced, rep.Tables[0].Action)
	require.Equal(t, len(before), rep.Tables[0].Removed)
	require.Equal(t, livePaths(t, src, outbox.TableDispatch), currentFiles(t, dir, outbox.TableDispatch))
	require.Zero(t, rep.Tables[0].Expired, "within the grace nothing expires")

	requireScanMatchesStore(t, ob, dir, outbox.TableDispatch)

	clock.Advance(DefaultGrace + time.Minute)
	rep, err = publish(ctx, src, cfg)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Tables[0].Expired, "the append snapshot, replaced over an hour ago")
	require.Len(t, rep.Tables[0].Deleted, len(before))
}

// requireScanMatchesStore checks that iceberg-go's own scan of the current
// snapshot answers, per ID, what the store's readers answer.
func requireScanMatchesStore(t *testing.T, ob *parquetbox.Outbox, dir string, tb outbox.Table) {
	t.Helper()
	ctx := context.Background()
	lc, err := openCatalog(ctx, dir, Config{}.WithDefaults())
	require.NoError(t, err)
	defer lc.close()
	tbl, err := lc.load(ctx, tb)
	require.NoError(t, err)
	recs, err := scanLatest(ctx, tbl, tb, tbl.CurrentSnapshot().SnapshotID)
	require.NoError(t, err)
	stats, err := ob.Stats(ctx)
	require.NoError(t, err)
	for _, st := range stats {
		if st.Table == tb {
			require.Equal(t, st.IDs, int64(len(recs)))
		}
	}
	for _, r := range recs {
		want, ok, err := ob.Latest(ctx, tb, r.ID)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, want.Status, r.Status, r.ID)
		require.Equal(t, want.Version, r.Version, r.ID)
		require.Equal(t, want.CreateCalls, r.CreateCalls, r.ID)
		require.True(t, want.UpdatedAt.Equal(r.UpdatedAt), r.ID)
	}
}
