package pgbox_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// insertForged inserts, by SQL as another tool would, a created row of
// id into table (its ID column idCol) with a cloud_task_id that is not
// the ID's hash.
func insertForged(t *testing.T, db *sql.DB, table, idCol, id string, at time.Time) {
	t.Helper()
	_, err := db.ExecContext(t.Context(), `INSERT INTO `+table+` (`+idCol+`, version, cloud_task_id, queue, run_id, task_key,
		attempt, kind, status, error_code, create_calls, payload_sha256, processor_uuid, created_at, updated_at)
		VALUES ($1, 0, 'd_forged', $2, 'exp', 'x', '1', '', 'created', '', 1, '', '', $3, $3)`, id, testQueue, at)
	require.NoError(t, err)
}

// refusedCounter returns, per table, what the exporter's metric counted.
func refusedCounter(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(t.Context(), &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != pgbox.MetricExportRefused {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				table, _ := dp.Attributes.Value("table")
				got[table.AsString()] += dp.Value
			}
		}
	}
	return got
}

// tableRows counts the rows of a table.
func tableRows(t *testing.T, db *sql.DB, table string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM `+table).Scan(&n))
	return n
}

// Rows no dispatcher can have written (inserted by SQL with a
// cloud_task_id that is not their ID's hash) are not written to Parquet
// and not marked exported: the export reports them (counts, a sample with
// the reason, a warning, the metric), stats counts them, a second export
// does not take them again, and Retain keeps their IDs while it deletes a
// clean exported one.
func TestExportReportsForeignRowsAndRetainKeepsThem(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	o := openSchema(t, db, "foreign", clock)
	names := pgbox.TableNames(pgbox.Config{Schema: "foreign"})
	for i := range 10 {
		insertForged(t, db, names[0], "dispatch_id", fmt.Sprintf("dispatch:exp:f%d:1", i), clock.Now())
	}
	tid, err := naming.NewRetryTimer("exp", "x", naming.Attempt(1), clock.Now().Add(time.Hour))
	require.NoError(t, err)
	insertForged(t, db, names[1], "timer_id", tid.String(), clock.Now())
	appendStates(t, o, "exp", "a", outbox.StatusPending, outbox.StatusCreated)
	insertForged(t, db, names[0], "dispatch_id", "dispatch:exp:a:1", clock.Now()) // beside a's real rows
	appendStates(t, o, "exp", "b", outbox.StatusPending, outbox.StatusCreated)

	reader := sdkmetric.NewManualReader()
	var log bytes.Buffer
	root := t.TempDir()
	e, err := pgbox.NewExporter(o, pgbox.ExportConfig{Root: root, Open: parquetTables,
		Logger: slog.New(slog.NewTextHandler(&log, nil)), MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })

	st, err := e.ExportOnce(t.Context())
	require.NoError(t, err)
	forged := func(seq int64, id string) pgbox.RefusedRow {
		return pgbox.RefusedRow{Table: outbox.TableDispatch, Seq: seq, ID: id,
			Reason: fmt.Sprintf(`cloud_task_id "d_forged" of %s is not the Cloud Tasks ID of that ID (want %q)`, id, mustCloudTaskID(t, id))}
	}
	require.Equal(t, pgbox.ExportStats{Batches: []int64{1}, Rows: [3]int64{4, 0, 0}, Refused: [3]int64{11, 1, 0},
		RefusedSample: []pgbox.RefusedRow{forged(1, "dispatch:exp:f0:1"), forged(2, "dispatch:exp:f1:1"), forged(3, "dispatch:exp:f2:1"),
			forged(4, "dispatch:exp:f3:1"), forged(5, "dispatch:exp:f4:1")}}, st)
	rows, history := exportedTree(t, root, "exp")
	require.Equal(t, [3]int64{4, 0, 0}, rows, "the files hold the four real rows only")
	require.Len(t, history, 4)
	require.Equal(t, map[string]int64{"dispatch_outbox": 11, "timers": 1}, refusedCounter(t, reader))
	warnings := strings.Count(log.String(), "level=WARN")
	require.Equal(t, 2, warnings, "one warning per table and batch: %s", log.String())
	require.Contains(t, log.String(), `rows=11`)

	stats, err := o.Stats(t.Context())
	require.NoError(t, err)
	var unexported, refused [3]int64
	for i, s := range stats {
		unexported[i], refused[i] = s.Unexported, s.Refused
	}
	require.Equal(t, [3]int64{0, 0, 0}, unexported)
	require.Equal(t, [3]int64{11, 1, 0}, refused)

	st, err = e.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, pgbox.ExportStats{}, st, "refused rows are not claimed again")

	clock.Advance(48 * time.Hour)
	deleted, err := o.Retain(t.Context(), 24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, []pgbox.RetainStats{{Table: outbox.TableDispatch, Rows: 2}, {Table: outbox.TableTimers}, {Table: outbox.TableDeliveries}},
		deleted, "b's two rows; a is kept with its refused row, and so are the foreign IDs")
	require.Equal(t, int64(13), tableRows(t, db, names[0]), "10 foreign IDs, a's two rows and its forged one")
	require.Equal(t, int64(1), tableRows(t, db, names[1]))
}

// The operator's tools: Refused lists what exporters refused, with the
// reason; QuarantineRefused moves those rows whole into the quarantine
// table, DeleteRefused deletes them; the real rows of the same IDs stay,
// and Retain then treats those IDs as any other.
func TestRefusedRowsAreListedThenQuarantinedOrDeleted(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	o := openSchema(t, db, "operator", clock)
	names := pgbox.TableNames(pgbox.Config{Schema: "operator"})
	quarantine := pgbox.QuarantineTableName(pgbox.Config{Schema: "operator"})
	require.Equal(t, `"operator"."ctdispatch_export_quarantine"`, quarantine)
	for i := range 3 {
		insertForged(t, db, names[0], "dispatch_id", fmt.Sprintf("dispatch:exp:f%d:1", i), clock.Now())
	}
	insertForged(t, db, names[1], "timer_id", "not an ID", clock.Now())
	appendStates(t, o, "exp", "a", outbox.StatusPending, outbox.StatusCreated)
	insertForged(t, db, names[0], "dispatch_id", "dispatch:exp:a:1", clock.Now())

	counts, rows, err := o.Refused(t.Context(), 10)
	require.NoError(t, err)
	require.Equal(t, [3]int64{}, counts, "no exporter has looked at them yet")
	require.Empty(t, rows)

	e := newExporter(t, o, t.TempDir())
	st, err := e.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, [3]int64{4, 1, 0}, st.Refused)

	counts, rows, err = o.Refused(t.Context(), 2)
	require.NoError(t, err)
	require.Equal(t, [3]int64{4, 1, 0}, counts)
	require.Equal(t, []string{"dispatch:exp:f0:1", "dispatch:exp:f1:1"}, []string{rows[0].ID, rows[1].ID}, "limit 2")
	require.Len(t, rows, 2)
	_, rows, err = o.Refused(t.Context(), 10)
	require.NoError(t, err)
	require.Len(t, rows, 5)
	require.Equal(t, pgbox.RefusedRow{Table: outbox.TableTimers, Seq: 1, ID: "not an ID",
		Reason: `ID "not an ID" is not an internal ID: invalid internal ID "not an ID": prefix "not an ID" must be "dispatch:", "timer:retry:" or "timer:heartbeat:"`}, rows[4])

	moved, err := o.QuarantineRefused(t.Context())
	require.NoError(t, err)
	require.Equal(t, [3]int64{4, 1, 0}, moved)
	require.Equal(t, int64(5), tableRows(t, db, quarantine))
	require.Equal(t, int64(2), tableRows(t, db, names[0]), "a's two real rows")
	require.Equal(t, int64(0), tableRows(t, db, names[1]))
	var from, id, reason, status string
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT from_table, id, reason, row_data->>'status' FROM `+quarantine+` WHERE seq = 3 AND from_table = 'dispatch_outbox'`).
		Scan(&from, &id, &reason, &status))
	require.Equal(t, []string{"dispatch_outbox", "dispatch:exp:f2:1", "created"}, []string{from, id, status})
	require.Contains(t, reason, `cloud_task_id "d_forged"`)
	counts, rows, err = o.Refused(t.Context(), 10)
	require.NoError(t, err)
	require.Equal(t, [3]int64{}, counts)
	require.Empty(t, rows)
	moved, err = o.QuarantineRefused(t.Context())
	require.NoError(t, err)
	require.Equal(t, [3]int64{}, moved, "nothing left to move")

	for i := range 3 {
		insertForged(t, db, names[0], "dispatch_id", fmt.Sprintf("dispatch:exp:g%d:1", i), clock.Now())
	}
	st, err = e.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, [3]int64{3, 0, 0}, st.Refused)
	deleted, err := o.DeleteRefused(t.Context())
	require.NoError(t, err)
	require.Equal(t, [3]int64{3, 0, 0}, deleted)
	require.Equal(t, int64(2), tableRows(t, db, names[0]))

	clock.Advance(48 * time.Hour)
	retained, err := o.Retain(t.Context(), 24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(2), retained[0].Rows, "a, no longer held by a refused row, goes as any exported ID")
}
