package pgbox_test

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// Retain deletes the IDs finished before the cutoff, whole, in batches;
// it keeps what is pending however old, and what changed since.
func TestRetainDeletesFinishedIDsInBatches(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := clockwork.NewFakeClockAt(t0)
	opts := pgbox.Config{Schema: "retain", Clock: clock}
	o, err := pgbox.New(db, opts)
	require.NoError(t, err)
	require.NoError(t, o.Migrate(t.Context()))
	put := func(task string, statuses ...outbox.Status) {
		id, err := naming.NewDispatch("keep", task, naming.Attempt(1))
		require.NoError(t, err)
		r := outbox.RecordOf(id)
		r.Queue = "projects/p/locations/l/queues/q"
		for _, st := range statuses {
			r.Status = st
			require.NoError(t, outbox.AppendAndWait(t.Context(), o, r))
		}
	}
	put("old", outbox.StatusPending, outbox.StatusCreated)
	put("stuck", outbox.StatusPending)
	put("reopened", outbox.StatusPending, outbox.StatusFailed)
	// 2,500 old finished IDs, more than two batches, written in bulk.
	_, err = db.ExecContext(t.Context(), `INSERT INTO `+pgbox.TableNames(opts)[0]+` (dispatch_id, version, cloud_task_id, queue, run_id, task_key,
		attempt, kind, status, error_code, create_calls, payload_sha256, processor_uuid, created_at, updated_at)
		SELECT 'dispatch:bulk:t' || g || ':1', 0, 'x', 'q', 'bulk', 't' || g, '1', 'dispatch', 'created', '', 1, '', 'p', $1, $1
		FROM generate_series(1, 2500) g`, t0)
	require.NoError(t, err)
	clock.Advance(2 * time.Hour)
	put("reopened", outbox.StatusPending, outbox.StatusCreated)
	put("recent", outbox.StatusCreated)

	stats, err := o.Retain(t.Context(), time.Hour)
	require.NoError(t, err)
	require.Equal(t, []pgbox.RetainStats{
		{Table: outbox.TableDispatch, Rows: 2 + 2500},
		{Table: outbox.TableTimers},
		{Table: outbox.TableDeliveries},
	}, stats)
	left, err := o.Lookup(t.Context(), outbox.Query{RunID: "keep", History: true})
	require.NoError(t, err)
	var states []string
	for _, r := range left {
		states = append(states, r.TaskKey+" "+string(r.Status))
	}
	require.Equal(t, []string{"recent created", "reopened pending", "reopened failed", "reopened pending", "reopened created", "stuck pending"}, states)

	_, err = o.Retain(t.Context(), 0)
	var ce *pgbox.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "olderThan", ce.Field)
}

// Once an exporter has run on the database, Retain keeps every ID with a
// state not yet exported: not in a batch, or in a batch whose files are
// not written (its exporter died); it deletes the rest as before.
func TestRetainKeepsWhatIsNotExported(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	o := openSchema(t, db, "retainexp", clock)
	e := newExporter(t, o, t.TempDir())
	appendStates(t, o, "ret", "exported", outbox.StatusPending, outbox.StatusCreated)
	_, err := e.ExportOnce(t.Context())
	require.NoError(t, err)
	appendStates(t, o, "ret", "unwritten", outbox.StatusPending, outbox.StatusCreated)
	exported, err := e.ExportOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, []int64{2}, exported.Batches)
	_, err = db.ExecContext(t.Context(), `UPDATE "retainexp"."ctdispatch_export_batches" SET written_at = NULL WHERE batch = 2`)
	require.NoError(t, err)
	appendStates(t, o, "ret", "unexported", outbox.StatusPending, outbox.StatusCreated)
	clock.Advance(2 * time.Hour)
	st, err := o.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, [2]int64{4, 0}, [2]int64{st[0].Unexported, st[1].Unexported}, "Stats counts what is left to export")
	require.True(t, st[0].Exporting)

	stats, err := o.Retain(t.Context(), time.Hour)
	require.NoError(t, err)
	require.Equal(t, []pgbox.RetainStats{{Table: outbox.TableDispatch, Rows: 2}, {Table: outbox.TableTimers}, {Table: outbox.TableDeliveries}}, stats)
	left, err := o.Lookup(t.Context(), outbox.Query{RunID: "ret"})
	require.NoError(t, err)
	var tasks []string
	for _, r := range left {
		tasks = append(tasks, r.TaskKey)
	}
	require.Equal(t, []string{"unexported", "unwritten"}, tasks)
}
