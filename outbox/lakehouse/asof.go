package lakehouse

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// ErrNoSnapshot is returned by ReadAsOf for a time before the table's
// oldest kept snapshot (or a table never published).
var ErrNoSnapshot = errors.New("lakehouse: no snapshot of the table at that time")

// ReadAsOf reads table t as its Iceberg snapshot current at time at had it,
// with iceberg-go's own scan: the latest state of each ID (the newest by
// outbox.Newer of the rows the snapshot's files hold, as the store's
// readers pick it), sorted by ID. Rows the store would not trust (see
// outbox.Record.Trusted) are left out, as its readers leave them out. A
// snapshot that expired (older than Config.Grace) is no longer there:
// ErrNoSnapshot.
func ReadAsOf(ctx context.Context, ob *parquetbox.Outbox, cfg Config, t outbox.Table, at time.Time) ([]outbox.Record, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	root, err := ob.Location()
	if err != nil {
		return nil, err
	}
	useRootBucket(ob, root)
	lc, err := openCatalog(ctx, root, cfg)
	if err != nil {
		return nil, err
	}
	defer lc.close()
	tbl, err := lc.load(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("%w: table %s: %w", ErrNoSnapshot, t, err)
	}
	snap := tbl.SnapshotAsOf(at.UnixMilli(), true)
	if snap == nil {
		return nil, fmt.Errorf("%w: table %s has none at or before %s", ErrNoSnapshot, t, at.UTC().Format(time.RFC3339Nano))
	}
	return scanLatest(ctx, tbl, t, snap.SnapshotID)
}

// scanLatest scans a snapshot and keeps the latest state of each ID.
func scanLatest(ctx context.Context, tbl *table.Table, t outbox.Table, snapshotID int64) ([]outbox.Record, error) {
	_, batches, err := tbl.Scan(table.WithSnapshotID(snapshotID)).ToArrowRecords(ctx)
	if err != nil {
		return nil, err
	}
	latest := map[string]outbox.Record{}
	for batch, err := range batches {
		if err != nil {
			return nil, err
		}
		err := eachRecord(batch, t, func(r outbox.Record) {
			if !r.Trusted() {
				return
			}
			if cur, ok := latest[r.ID]; !ok || outbox.Newer(&r, &cur) {
				latest[r.ID] = r
			}
		})
		batch.Release()
		if err != nil {
			return nil, err
		}
	}
	out := make([]outbox.Record, 0, len(latest))
	for _, r := range latest {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// eachRecord calls fn with each row of batch as a record of table t.
func eachRecord(batch arrow.RecordBatch, t outbox.Table, fn func(outbox.Record)) error {
	sc := batch.Schema()
	col := func(name string) arrow.Array {
		if i := sc.FieldIndices(name); len(i) > 0 {
			return batch.Column(i[0])
		}
		return nil
	}
	var idCol string
	for _, c := range parquetbox.Columns(t) {
		if c.ID {
			idCol = c.Name
		}
	}
	ids := col(idCol)
	if ids == nil {
		return fmt.Errorf("lakehouse: scan of %s has no %s column", t, idCol)
	}
	cols := map[string]arrow.Array{}
	for _, f := range sc.Fields() {
		cols[f.Name] = col(f.Name)
	}
	for i := 0; i < int(batch.NumRows()); i++ {
		s := func(name string) string { return str(cols[name], i) }
		n := func(name string) int64 { return integer(cols[name], i) }
		tm := func(name string) time.Time { return timestamp(cols[name], i) }
		r := outbox.Record{
			Table: t, ID: s(idCol), CloudTaskID: s("cloud_task_id"), Queue: s("queue"), RunID: s("run_id"),
			TaskKey: s("task_key"), Attempt: s("attempt"), Kind: s("kind"), Status: outbox.Status(s("status")),
			ErrorCode: s("error_code"), CreateCalls: int32(n("create_calls")), PayloadSHA256: s("payload_sha256"),
			ProcessorUUID: s("processor_uuid"), CreatedAt: tm("created_at"), UpdatedAt: tm("updated_at"),
			DueAt: tm("due_at"), Version: n("version"), TraceID: s("trace_id"), SpanID: s("span_id"),
			Delivery: outbox.DeliveryFields{
				RetryCount: int32(n("retry_count")), ExecutionCount: int32(n("execution_count")),
				HTTPStatus: int32(n("http_status")), Latency: time.Duration(n("latency_us")) * time.Microsecond,
			},
		}
		r.Normalize()
		fn(r)
	}
	return nil
}

func str(a arrow.Array, i int) string {
	if a == nil || a.IsNull(i) {
		return ""
	}
	switch a := a.(type) {
	case *array.String:
		return a.Value(i)
	case *array.LargeString:
		return a.Value(i)
	case *array.StringView:
		return a.Value(i)
	}
	return ""
}

func integer(a arrow.Array, i int) int64 {
	if a == nil || a.IsNull(i) {
		return 0
	}
	switch a := a.(type) {
	case *array.Int64:
		return a.Value(i)
	case *array.Int32:
		return int64(a.Value(i))
	}
	return 0
}

func timestamp(a arrow.Array, i int) time.Time {
	if a == nil || a.IsNull(i) {
		return time.Time{}
	}
	ts, ok := a.(*array.Timestamp)
	if !ok {
		return time.Time{}
	}
	unit := ts.DataType().(*arrow.TimestampType).Unit
	v := int64(ts.Value(i))
	if v == 0 {
		return time.Time{}
	}
	return arrow.Timestamp(v).ToTime(unit).UTC()
}
