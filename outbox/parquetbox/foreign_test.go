package parquetbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"
)

// The files under testdata/ were written by DuckDB 1.5 (see
// testdata/README.md): nullable columns in another order, an extra column,
// BIGINT create_calls, TIMESTAMP WITH TIME ZONE and plain TIMESTAMP, rows in
// no particular order, four row groups.
func copyTestdata(t *testing.T, root string, table outbox.Table, name string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	// The rows' first day: the partition they belong in.
	dir := filepath.Join(root, string(table), "created_date=2026-02-01")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
}

// duckRecord is row i of testdata/duckdb_dispatch_outbox.parquet, as the
// SQL in testdata/README.md defines it.
func duckRecord(i int) outbox.Record {
	r := outbox.Record{
		Table: outbox.TableDispatch, ID: fmt.Sprintf("dispatch:duck%d:task%d:1", i/10, i%10),
		Queue: "projects/p/locations/l/queues/duck",
		RunID: fmt.Sprintf("duck%d", i/10), TaskKey: fmt.Sprintf("task%d", i%10), Attempt: "1", Kind: "dispatch",
		Status: outbox.StatusCreated, CreateCalls: int32(i % 3), ProcessorUUID: "0b6f8e2a-3c1d-4f5e-8a9b-1c2d3e4f5a60",
		CreatedAt: time.Date(2026, 2, 1, 0, 0, i, 0, time.UTC), UpdatedAt: time.Date(2026, 2, 1, 0, 0, i+1, 0, time.UTC),
	}
	switch {
	case i%7 == 0:
		r.Status = outbox.StatusPending
	case i%11 == 0:
		r.Status, r.ErrorCode = outbox.StatusFailed, "PermissionDenied"
	}
	r.CloudTaskID = mustHash(r.ID)
	r.TaskName = r.Queue + "/tasks/" + r.CloudTaskID
	return r
}

func TestReadsFilesWrittenByDuckDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	copyTestdata(t, b.root, outbox.TableDispatch, "duckdb_dispatch_outbox.parquet")
	copyTestdata(t, b.root, outbox.TableTimers, "duckdb_timers.parquet")
	o := b.open(t, procA)

	check := func() {
		for _, i := range []int{0, 1, 77, 1999} {
			want := duckRecord(i)
			got, err := o.Lookup(ctx, outbox.Query{ID: want.ID})
			require.NoError(t, err)
			want.PayloadSHA256 = got[0].PayloadSHA256 // DuckDB's sha256(), not recomputed here
			require.Len(t, got[0].PayloadSHA256, 64)
			require.Equal(t, []outbox.Record{want}, got, "row %d", i)

			byTask, err := o.Lookup(ctx, outbox.Query{CloudTaskID: want.CloudTaskID})
			require.NoError(t, err)
			require.Equal(t, []outbox.Record{want}, byTask)
		}
		run, err := o.Lookup(ctx, outbox.Query{Table: outbox.TableDispatch, RunID: "duck7"})
		require.NoError(t, err)
		require.Len(t, run, 10)
		for k, r := range run {
			require.Equal(t, duckRecord(70+k).ID, r.ID)
		}
		got, ok, err := o.Latest(ctx, outbox.TableTimers, "timer:retry:duck5:t:1:1772323205")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, time.Unix(1772323205, 0).UTC(), got.DueAt)
		require.Equal(t, time.UnixMicro(1772236800000005).UTC(), got.UpdatedAt)
		require.Equal(t, "retry", got.Kind)
	}
	check()

	pending, err := o.Pending(ctx, outbox.TableDispatch, time.Hour)
	require.NoError(t, err)
	require.Len(t, pending, 286) // i%7 == 0 for i in [0, 2000)

	st, err := o.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2000), st[0].IDs)
	require.Equal(t, map[string]int64{"pending": 286, "failed": 156, "created": 1558}, st[0].ByStatus)

	// Compaction takes the foreign files in (sorting them) and the result
	// answers the same.
	cs, err := o.compact(ctx, CompactConfig{Full: true})
	require.NoError(t, err)
	require.Equal(t, int64(2000), cs.Tables[0].RowsOut)
	require.Equal(t, int64(100), cs.Tables[1].RowsOut)
	check()
	require.Empty(t, o.Damaged())
}

// otherLayout is a dispatch_outbox file as another parquet-go program might
// write it: columns in another order, optional strings, BIGINT
// create_calls, millisecond timestamps, an extra column.
type otherLayout struct {
	Status      *string   `parquet:"status,optional"`
	UpdatedAt   time.Time `parquet:"updated_at,timestamp(millisecond)"`
	Extra       float64   `parquet:"extra"`
	CreateCalls int64     `parquet:"create_calls"`
	DispatchID  string    `parquet:"dispatch_id"`
	CloudTaskID *string   `parquet:"cloud_task_id,optional"`
	RunID       string    `parquet:"run_id,dict"`
	CreatedAt   time.Time `parquet:"created_at,timestamp(millisecond)"`
}

func TestReadsAnotherParquetGoLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	dir := filepath.Join(b.root, string(outbox.TableDispatch), "created_date=2026-03-01")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	var rows []otherLayout
	for i := range 50 {
		id := fmt.Sprintf("dispatch:other:t%d:1", 49-i)
		st, ct := "created", mustHash(id)
		row := otherLayout{Status: &st, UpdatedAt: t0.Add(time.Duration(i) * time.Millisecond), CreateCalls: int64(i),
			DispatchID: id, RunID: "other", CreatedAt: t0, Extra: 1.5, CloudTaskID: &ct}
		rows = append(rows, row)
	}
	f, err := os.Create(filepath.Join(dir, "other.parquet"))
	require.NoError(t, err)
	w := parquet.NewGenericWriter[otherLayout](f, parquet.MaxRowsPerRowGroup(16))
	_, err = w.Write(rows)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())

	o := b.open(t, procA)
	got, err := o.Lookup(ctx, outbox.Query{ID: "dispatch:other:t9:1"})
	require.NoError(t, err)
	require.Equal(t, []outbox.Record{{
		Table: outbox.TableDispatch, ID: "dispatch:other:t9:1", CloudTaskID: mustHash("dispatch:other:t9:1"), RunID: "other", Kind: "dispatch", Status: outbox.StatusCreated,
		CreateCalls: 40, CreatedAt: t0, UpdatedAt: t0.Add(40 * time.Millisecond),
	}}, got)
	byTask, err := o.Lookup(ctx, outbox.Query{CloudTaskID: mustHash("dispatch:other:t39:1")})
	require.NoError(t, err)
	require.Len(t, byTask, 1)
	require.Equal(t, "dispatch:other:t39:1", byTask[0].ID)
	all, err := o.Lookup(ctx, outbox.Query{RunID: "other"})
	require.NoError(t, err)
	require.Len(t, all, 50)
}
