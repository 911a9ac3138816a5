package parquetbox

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/internal/testtools/duckdbtest"
	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/stretchr/testify/require"
)

// duckDB runs SQL statements in DuckDB (see package duckdbtest).
var duckDB = duckdbtest.Query

// DuckDB reads the partitioned tables with the README's queries: hive
// partitioning turns created_date=… into a column it prunes on, the
// buckets in file names change nothing for it, and the latest state per
// ID comes out the same as Lookup's.
func TestDuckDBReadsPartitionedTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	opts := b.options(procA)
	opts.Buckets = 0 // the default, 8
	o, err := Open(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { o.Close() })
	for day := range 3 {
		for _, task := range []string{"a", "b"} {
			r := dispatchRec("duck", task+string(rune('0'+day)), "1", outbox.StatusPending)
			require.NoError(t, outbox.AppendAndWait(ctx, o, r))
			r.Status = outbox.StatusCreated
			if task == "b" {
				r.Status, r.ErrorCode = outbox.StatusFailed, "PermissionDenied"
			}
			require.NoError(t, outbox.AppendAndWait(ctx, o, r))
		}
		require.NoError(t, o.Flush(ctx))
		b.clock.Advance(24 * time.Hour)
	}
	st, err := o.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDispatch}, Full: true})
	require.NoError(t, err)
	require.Equal(t, ManifestWritten, st.Tables[0].Manifest.Action, "outside the table, where the globs below do not reach")
	units := map[string]bool{}
	for _, p := range st.Tables[0].Partitions {
		units[p.Partition+" "+p.Bucket] = true
	}
	require.Len(t, units, 6, "tasks a and b of each of 3 days, in buckets of their own")
	require.NoError(t, outbox.AppendAndWait(ctx, o, dispatchRec("duck", "c2", "1", outbox.StatusPending))) // day 4, not compacted
	require.NoError(t, o.Flush(ctx))

	glob := filepath.Join(b.root, "dispatch_outbox", "**", "*.parquet")
	got := duckDB(t,
		// Rows per partition.
		`SELECT created_date::VARCHAR AS day, count(*) AS n FROM read_parquet('`+glob+`', hive_partitioning = true, union_by_name = true) GROUP BY ALL ORDER BY day`,
		// The latest state of each ID, one partition only (pruned by date).
		`SELECT dispatch_id, status FROM (
		   SELECT *, row_number() OVER (PARTITION BY dispatch_id ORDER BY updated_at DESC) AS n
		   FROM read_parquet('`+glob+`', hive_partitioning = true, union_by_name = true) WHERE created_date = DATE '2026-03-02')
		 WHERE n = 1 ORDER BY dispatch_id`,
		// Status counts over the latest states.
		`SELECT status, count(*) AS n FROM (
		   SELECT *, row_number() OVER (PARTITION BY dispatch_id ORDER BY updated_at DESC) AS n
		   FROM read_parquet('`+glob+`', hive_partitioning = true, union_by_name = true)) WHERE n = 1 GROUP BY ALL ORDER BY status`,
	)
	require.Equal(t, []string{
		`[{"day":"2026-03-01","n":"2"},{"day":"2026-03-02","n":"2"},{"day":"2026-03-03","n":"2"},{"day":"2026-03-04","n":"1"}]`,
		`[{"dispatch_id":"dispatch:duck:a1:1","status":"created"},{"dispatch_id":"dispatch:duck:b1:1","status":"failed"}]`,
		`[{"status":"created","n":"3"},{"status":"failed","n":"3"},{"status":"pending","n":"1"}]`,
	}, got)
}
