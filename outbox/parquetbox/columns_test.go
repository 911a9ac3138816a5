package parquetbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Columns lists each table's columns in file order, with their kinds and
// marks, and Text gives a record's value in each as the table stores it.
func TestColumns(t *testing.T) {
	t.Parallel()
	names := func(cols []Column) []string {
		var out []string
		for _, c := range cols {
			out = append(out, c.Name)
		}
		return out
	}
	require.Equal(t, []string{"dispatch_id", "cloud_task_id", "queue", "run_id", "task_key", "attempt", "status", "error_code",
		"create_calls", "payload_sha256", "processor_uuid", "created_at", "updated_at", "version", "trace_id", "span_id"},
		names(Columns(outbox.TableDispatch)))
	require.Equal(t, []string{"timer_id", "cloud_task_id", "queue", "run_id", "task_key", "attempt", "kind", "status", "error_code",
		"create_calls", "payload_sha256", "processor_uuid", "created_at", "updated_at", "due_at", "version", "trace_id", "span_id"},
		names(Columns(outbox.TableTimers)))
	deliveries := Columns(outbox.TableDeliveries)
	require.Equal(t, []string{"delivery_id", "dispatch_id", "timer_id", "cloud_task_id", "queue", "run_id", "task_key", "attempt",
		"kind", "status", "retry_count", "execution_count", "http_status", "latency_us", "processor_uuid", "created_at", "updated_at",
		"version", "trace_id", "span_id"}, names(deliveries))
	require.Nil(t, Columns("other"))

	marks := map[string]Column{}
	for _, c := range deliveries {
		c.col = nil
		marks[c.Name] = c
	}
	require.Equal(t, Column{Name: "delivery_id", Kind: ColumnString, ID: true}, marks["delivery_id"])
	require.Equal(t, Column{Name: "dispatch_id", Kind: ColumnString, Derived: true}, marks["dispatch_id"])
	require.Equal(t, Column{Name: "http_status", Kind: ColumnInt}, marks["http_status"])
	require.Equal(t, Column{Name: "latency_us", Kind: ColumnInt}, marks["latency_us"])
	require.Equal(t, Column{Name: "created_at", Kind: ColumnTime}, marks["created_at"])
	require.Equal(t, Column{Name: "trace_id", Kind: ColumnString, Optional: true}, marks["trace_id"])

	at := time.Date(2026, 3, 1, 12, 0, 0, 1000, time.UTC)
	r := outbox.Record{Table: outbox.TableDeliveries, ID: "dispatch:r:t:1#x", Kind: "dispatch", Status: outbox.StatusCreated,
		CreatedAt: at, Delivery: outbox.DeliveryFields{HTTPStatus: 503, Latency: 1500 * time.Microsecond}}
	got := map[string]string{}
	for _, c := range deliveries {
		got[c.Name] = c.Text(&r)
	}
	require.Equal(t, map[string]string{
		"delivery_id": "dispatch:r:t:1#x", "dispatch_id": "dispatch:r:t:1", "timer_id": "", "cloud_task_id": "", "queue": "",
		"run_id": "", "task_key": "", "attempt": "", "kind": "dispatch", "status": "created", "retry_count": "0",
		"execution_count": "0", "http_status": "503", "latency_us": "1500", "processor_uuid": "",
		"created_at": "2026-03-01T12:00:00.000001Z", "updated_at": "", "version": "0", "trace_id": "", "span_id": "",
	}, got)
	require.Equal(t, "", Column{Name: "made up"}.Text(&r))
}
