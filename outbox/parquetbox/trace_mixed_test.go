package parquetbox

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

const (
	testTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	testSpanID  = "00f067aa0ba902b7"
)

// copyTree copies the files under src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o700))
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	}))
}

// A root holding files written before the trace columns existed
// (testdata/pretrace: a dispatch, a timer and a delivery of
// dispatch:old:a:1) and files written with them: reads give the old rows
// empty IDs and the new ones theirs, before and after compaction merges
// both kinds into one file, and the docs' DuckDB queries (with
// union_by_name) read the old rows' columns as NULL.
func TestTraceColumnsInMixedDirectories(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	copyTree(t, filepath.Join("testdata", "pretrace"), b.root)
	o := b.open(t, procB)
	b.clock.Advance(time.Minute)
	d := dispatchRec("new", "a", "1", outbox.StatusCreated)
	d.TraceID, d.SpanID = testTraceID, testSpanID
	tid, err := naming.NewRetryTimer("new", "a", naming.Attempt(1), t0.Add(time.Hour))
	require.NoError(t, err)
	tm := outbox.RecordOf(tid)
	tm.Queue, tm.Status, tm.TraceID, tm.SpanID = testQueue, outbox.StatusCreated, testTraceID, testSpanID
	id, err := naming.NewDispatch("new", "a", naming.Attempt(1))
	require.NoError(t, err)
	_, dl := deliveryRecs(id, "019ab6e2-0000-7000-8000-000000000002", 0, outbox.StatusDone, 200, b.clock.Now())
	dl.TraceID, dl.SpanID = testTraceID, testSpanID
	for _, r := range []outbox.Record{d, tm, dl} {
		require.NoError(t, outbox.AppendAndWait(ctx, o, r))
	}
	require.NoError(t, o.Flush(ctx))

	check := func(when string) {
		for _, tc := range []struct {
			table   outbox.Table
			q       outbox.Query
			traceID string
		}{
			{outbox.TableDispatch, outbox.Query{Table: outbox.TableDispatch, ID: "dispatch:old:a:1"}, ""},
			{outbox.TableDispatch, outbox.Query{Table: outbox.TableDispatch, ID: "dispatch:new:a:1"}, testTraceID},
			{outbox.TableTimers, outbox.Query{Table: outbox.TableTimers, RunID: "old"}, ""},
			{outbox.TableTimers, outbox.Query{Table: outbox.TableTimers, RunID: "new"}, testTraceID},
			{outbox.TableDeliveries, outbox.Query{ID: "dispatch:old:a:1"}, ""},
			{outbox.TableDeliveries, outbox.Query{ID: "dispatch:new:a:1"}, testTraceID},
		} {
			var recs []outbox.Record
			if tc.table == outbox.TableDeliveries {
				recs, err = outbox.LookupDeliveries(ctx, o, tc.q)
			} else {
				recs, err = o.Lookup(ctx, tc.q)
			}
			require.NoError(t, err)
			require.Len(t, recs, 1, "%s: %s %+v", when, tc.table, tc.q)
			require.Equal(t, tc.traceID, recs[0].TraceID, "%s: %s %+v", when, tc.table, tc.q)
			if tc.traceID != "" {
				require.Equal(t, testSpanID, recs[0].SpanID)
			}
		}
	}
	check("before compaction")
	st, err := o.compact(ctx, CompactConfig{Full: true})
	require.NoError(t, err)
	require.NotEmpty(t, st.Tables)
	check("after compaction")

	glob := func(table outbox.Table) string { return filepath.Join(b.root, string(table), "**", "*.parquet") }
	got := duckDB(t,
		`SELECT dispatch_id, trace_id, span_id FROM read_parquet('`+glob(outbox.TableDispatch)+`', hive_partitioning = true, union_by_name = true)
		 QUALIFY row_number() OVER (PARTITION BY dispatch_id ORDER BY updated_at DESC) = 1 ORDER BY dispatch_id`,
		`SELECT timer_id IS NOT NULL AS t, trace_id FROM read_parquet('`+glob(outbox.TableTimers)+`', hive_partitioning = true, union_by_name = true) ORDER BY run_id`,
		`SELECT dispatch_id, trace_id FROM read_parquet('`+glob(outbox.TableDeliveries)+`', hive_partitioning = true, union_by_name = true)
		 QUALIFY row_number() OVER (PARTITION BY delivery_id ORDER BY updated_at DESC) = 1 ORDER BY dispatch_id`,
	)
	require.Equal(t, []string{
		`[{"dispatch_id":"dispatch:new:a:1","trace_id":"` + testTraceID + `","span_id":"` + testSpanID + `"},{"dispatch_id":"dispatch:old:a:1","trace_id":null,"span_id":null}]`,
		`[{"t":true,"trace_id":"` + testTraceID + `"},{"t":true,"trace_id":null}]`,
		`[{"dispatch_id":"dispatch:new:a:1","trace_id":"` + testTraceID + `"},{"dispatch_id":"dispatch:old:a:1","trace_id":null}]`,
	}, got)
}
