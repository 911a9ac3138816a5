package cli

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// query's columns are the tables' column list, in the order and under the
// names the formats have always had; every column of every table shows
// (its ID column as id) but version and the deliveries' join columns.
func TestQueryColumnsComeFromTheColumnList(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"table", "id", "cloud_task_id", "task_name", "queue", "run_id", "task_key", "attempt",
		"kind", "status", "error_code", "create_calls", "payload_sha256", "processor_uuid", "created_at", "updated_at", "due_at",
		"trace_id", "span_id"}, csvHeader)
	require.Equal(t, []string{"retry_count", "execution_count", "http_status", "latency_us"}, csvDeliveryHeader)

	shown := map[string]bool{}
	for _, c := range queryColumns {
		if c.col != nil {
			shown[c.col.Name] = true
		}
	}
	for _, table := range outbox.Tables() {
		for _, c := range parquetbox.Columns(table) {
			if c.Name == "version" || c.Derived || c.ID {
				continue // left out, or shown as id
			}
			require.True(t, shown[c.Name], "%s.%s is not in query's output", table, c.Name)
		}
	}
}

// A JSON line has the columns' keys in order, numbers as numbers, the
// nullable columns and the times only when set, and the deliveries
// table's own columns in its records only.
func TestQueryJSONLine(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 1000, time.UTC)
	for _, tt := range []struct {
		name string
		rec  outbox.Record
		want string
	}{
		{"dispatch", outbox.Record{Table: outbox.TableDispatch, ID: "dispatch:r:t:1", CloudTaskID: "d_x", TaskName: "projects/p/locations/l/queues/q/tasks/d_x",
			Queue: "q", RunID: "r", TaskKey: "t", Attempt: "1", Status: outbox.StatusCreated, CreateCalls: 2, PayloadSHA256: "ab",
			ProcessorUUID: "p<&>", CreatedAt: at, UpdatedAt: at.Add(time.Second), Version: 3},
			`{"table":"dispatch_outbox","id":"dispatch:r:t:1","cloud_task_id":"d_x","task_name":"projects/p/locations/l/queues/q/tasks/d_x",` +
				`"queue":"q","run_id":"r","task_key":"t","attempt":"1","kind":"","status":"created","error_code":"","create_calls":2,` +
				`"payload_sha256":"ab","processor_uuid":"p\u003c\u0026\u003e","created_at":"2026-03-01T12:00:00.000001Z","updated_at":"2026-03-01T12:00:01.000001Z"}` + "\n"},
		{"timer with a trace", outbox.Record{Table: outbox.TableTimers, ID: "timer:retry:r:t:1:1", Kind: "retry", Status: outbox.StatusPending,
			CreatedAt: at, UpdatedAt: at, DueAt: at.Add(time.Minute), TraceID: "4bf9", SpanID: "00f0"},
			`{"table":"timers","id":"timer:retry:r:t:1:1","cloud_task_id":"","task_name":"","queue":"","run_id":"","task_key":"","attempt":"",` +
				`"kind":"retry","status":"pending","error_code":"","create_calls":0,"payload_sha256":"","processor_uuid":"",` +
				`"created_at":"2026-03-01T12:00:00.000001Z","updated_at":"2026-03-01T12:00:00.000001Z","due_at":"2026-03-01T12:01:00.000001Z",` +
				`"trace_id":"4bf9","span_id":"00f0"}` + "\n"},
		{"delivery", outbox.Record{Table: outbox.TableDeliveries, ID: "dispatch:r:t:1#u", Kind: "dispatch", Status: "done", CreatedAt: at, UpdatedAt: at,
			Delivery: outbox.DeliveryFields{RetryCount: 1, ExecutionCount: 0, HTTPStatus: 200, Latency: 1500 * time.Microsecond}},
			`{"table":"deliveries","id":"dispatch:r:t:1#u","cloud_task_id":"","task_name":"","queue":"","run_id":"","task_key":"","attempt":"",` +
				`"kind":"dispatch","status":"done","error_code":"","create_calls":0,"payload_sha256":"","processor_uuid":"",` +
				`"created_at":"2026-03-01T12:00:00.000001Z","updated_at":"2026-03-01T12:00:00.000001Z",` +
				`"retry_count":1,"execution_count":0,"http_status":200,"latency_us":1500}` + "\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, string(appendJSON(nil, &tt.rec)))
		})
	}
}
