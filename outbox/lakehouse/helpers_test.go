package lakehouse_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/lakehouse"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// t0 is the fake clocks' start: a fixed instant, so file names and days
// are the same on every run.
var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// openRoot opens the outbox in dir as one process, on a fake clock at
// t0 the test moves, and closes it when the test ends.
func openRoot(t *testing.T, dir string) (*parquetbox.Outbox, *clockwork.FakeClock) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(t0)
	ob, err := parquetbox.Open(context.Background(), parquetbox.Config{Root: dir, ProcessorUUID: uuid.New(), Clock: clock})
	require.NoError(t, err)
	t.Cleanup(func() { ob.Close() })
	return ob, clock
}

// writeDispatches records n dispatches of run as pending, then (when
// created) as created, and flushes them into Parquet files.
func writeDispatches(t *testing.T, ob *parquetbox.Outbox, clock clockwork.Clock, run string, n int, created bool) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		id, err := naming.NewDispatch(run, "extract", naming.Attempt(uint64(i+1)))
		require.NoError(t, err)
		rec := outbox.Record{Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(),
			Queue: "projects/p/locations/l/queues/q", RunID: run, TaskKey: id.TaskKey(), Attempt: id.Attempt(),
			Status: outbox.StatusPending}
		rec.Follow(nil, clock.Now())
		require.NoError(t, outbox.AppendAndWait(ctx, ob, rec))
		if created {
			next := rec
			next.Status, next.CreateCalls = outbox.StatusCreated, 1
			next.Follow(&rec, clock.Now())
			require.NoError(t, outbox.AppendAndWait(ctx, ob, next))
		}
	}
	require.NoError(t, ob.Flush(ctx))
}

// row is one row of a table as a scan reads it: the ID, the state and
// its version.
type row struct {
	ID      string
	Status  string
	Version int64
}

func (r row) String() string { return fmt.Sprintf("%s %s v%d", r.ID, r.Status, r.Version) }

// currentTable loads table tb's current metadata (from the location
// Status reports, so it works with any catalog) as iceberg-go's table.
func currentTable(t *testing.T, ob *parquetbox.Outbox, cfg lakehouse.Config, tb outbox.Table) *table.Table {
	t.Helper()
	ctx := context.Background()
	sts, err := lakehouse.Status(ctx, ob, cfg)
	require.NoError(t, err)
	for _, st := range sts {
		if st.Table == tb {
			require.True(t, st.Published, "table %s is published", tb)
			loc := st.MetadataLocation
			tbl, err := table.NewFromLocation(ctx, table.Identifier{"ctdispatch", string(tb)}, loc,
				iceio.LoadFSFunc(cfg.Properties, loc), nil)
			require.NoError(t, err)
			return tbl
		}
	}
	t.Fatalf("no status of %s", tb)
	return nil
}

// scanRows reads snapshot snap of a table with iceberg-go's own scan and
// returns its rows, sorted.
func scanRows(t *testing.T, tbl *table.Table, snap int64) []row {
	t.Helper()
	_, batches, err := tbl.Scan(table.WithSnapshotID(snap)).ToArrowRecords(context.Background())
	require.NoError(t, err)
	return collectRows(t, batches)
}

// collectRows gathers the dispatch rows of record batches, sorted.
func collectRows(t *testing.T, batches func(func(arrow.RecordBatch, error) bool)) []row {
	t.Helper()
	var rows []row
	for b, err := range batches {
		require.NoError(t, err)
		ids := column[*array.String](t, b, "dispatch_id")
		statuses := column[*array.String](t, b, "status")
		versions := column[*array.Int64](t, b, "version")
		for i := range int(b.NumRows()) {
			r := row{ID: ids.Value(i), Status: statuses.Value(i)}
			if !versions.IsNull(i) {
				r.Version = versions.Value(i)
			}
			rows = append(rows, r)
		}
		b.Release()
	}
	sortRows(rows)
	return rows
}

func column[A arrow.Array](t *testing.T, b arrow.RecordBatch, name string) A {
	t.Helper()
	idx := b.Schema().FieldIndices(name)
	require.Len(t, idx, 1, "column %s", name)
	a, ok := b.Column(idx[0]).(A)
	require.True(t, ok, "column %s is %T", name, b.Column(idx[0]))
	return a
}

func sortRows(rows []row) {
	sort.Slice(rows, func(i, j int) bool { return rows[i].String() < rows[j].String() })
}

// byRun returns a query of each run's dispatches.
func byRun(runs ...string) []outbox.Query {
	qs := make([]outbox.Query, len(runs))
	for i, run := range runs {
		qs[i] = outbox.Query{Table: outbox.TableDispatch, RunID: run}
	}
	return qs
}

// storeRows returns every recorded state of the runs' dispatches as the
// store's own readers answer (History: the states the live files hold).
func storeRows(t *testing.T, ob *parquetbox.Outbox, runs ...string) []row {
	t.Helper()
	return queryRows(t, ob, byRun(runs...))
}

// queryRows returns every recorded state of what the queries select, as
// the store's own readers answer, sorted.
func queryRows(t *testing.T, ob *parquetbox.Outbox, qs []outbox.Query) []row {
	t.Helper()
	var rows []row
	for _, q := range qs {
		q.History = true
		recs, err := ob.Lookup(context.Background(), q)
		require.NoError(t, err)
		for _, r := range recs {
			rows = append(rows, row{ID: r.ID, Status: string(r.Status), Version: r.Version})
		}
	}
	sortRows(rows)
	return rows
}

// latestIDs returns each ID of rows once, with its newest status, sorted.
func latestIDs(rows []row) []string {
	latest := map[string]row{}
	for _, r := range rows {
		if cur, ok := latest[r.ID]; !ok || r.Version > cur.Version {
			latest[r.ID] = r
		}
	}
	var out []string
	for id, r := range latest {
		out = append(out, id+" "+r.Status)
	}
	sort.Strings(out)
	return out
}

// storeLatest returns each ID of the runs once with its latest status, as
// the store's readers answer, sorted.
func storeLatest(t *testing.T, ob *parquetbox.Outbox, runs ...string) []string {
	t.Helper()
	return queryLatest(t, ob, byRun(runs...))
}

// queryLatest returns each ID the queries select once with its latest
// status, as the store's readers answer, sorted.
func queryLatest(t *testing.T, ob *parquetbox.Outbox, qs []outbox.Query) []string {
	t.Helper()
	var out []string
	for _, q := range qs {
		recs, err := ob.Lookup(context.Background(), q)
		require.NoError(t, err)
		for _, r := range recs {
			out = append(out, r.ID+" "+string(r.Status))
		}
	}
	sort.Strings(out)
	return out
}

// liveLocations returns the locations of table tb's live files, sorted.
func liveLocations(t *testing.T, ob *parquetbox.Outbox, tb outbox.Table) []string {
	t.Helper()
	live, err := ob.LiveFiles(context.Background(), tb)
	require.NoError(t, err)
	out := make([]string, len(live))
	for i, f := range live {
		out[i] = f.Location
	}
	sort.Strings(out)
	return out
}

// snapshotPaths returns the data file paths a snapshot's manifests name,
// sorted, a path named twice listed twice.
func snapshotPaths(t *testing.T, tbl *table.Table, snap *table.Snapshot) []string {
	t.Helper()
	ctx := context.Background()
	fsys, err := tbl.FS(ctx)
	require.NoError(t, err)
	manifests, err := snap.Manifests(fsys)
	require.NoError(t, err)
	var out []string
	for _, m := range manifests {
		for e, err := range m.Entries(fsys, true) {
			require.NoError(t, err)
			out = append(out, e.DataFile().FilePath())
		}
	}
	sort.Strings(out)
	return out
}

// registrations returns, for each data file path, the snapshots whose
// manifests record it as added: a path registered twice has two.
func registrations(t *testing.T, tbl *table.Table) map[string][]int64 {
	t.Helper()
	ctx := context.Background()
	fsys, err := tbl.FS(ctx)
	require.NoError(t, err)
	out := map[string][]int64{}
	seen := map[string]bool{} // manifests are shared between snapshots
	for _, snap := range tbl.Metadata().Snapshots() {
		manifests, err := snap.Manifests(fsys)
		require.NoError(t, err)
		for _, m := range manifests {
			if seen[m.FilePath()] {
				continue
			}
			seen[m.FilePath()] = true
			for e, err := range m.Entries(fsys, false) {
				require.NoError(t, err)
				if e.Status() == iceberg.EntryStatusADDED {
					out[e.DataFile().FilePath()] = append(out[e.DataFile().FilePath()], e.SnapshotID())
				}
			}
		}
	}
	return out
}

// planPaths returns the paths of a scan plan's files, sorted.
func planPaths(tasks []table.FileScanTask) []string {
	var out []string
	for _, task := range tasks {
		out = append(out, task.File.FilePath())
	}
	sort.Strings(out)
	return out
}

// localPath turns a file:// location into a path.
func localPath(loc string) string { return strings.TrimPrefix(loc, "file://") }
