package parquetbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Time budget: under 1 s.

// deliveryRecs returns the started and the outcome record of one delivery
// of id, arriving at the clock's now and answered 5 ms later.
func deliveryRecs(id naming.ID, suffix string, retries int32, st outbox.Status, code int32, arrived time.Time) (outbox.Record, outbox.Record) {
	s := outbox.DeliveryRecordOf(id, suffix)
	s.Queue, s.Status, s.CreatedAt, s.UpdatedAt = "q", outbox.StatusStarted, arrived, arrived
	s.Delivery = outbox.DeliveryFields{RetryCount: retries, ExecutionCount: retries}
	o := s
	o.Status, o.UpdatedAt = st, arrived.Add(5*time.Millisecond)
	o.Delivery.HTTPStatus, o.Delivery.Latency = code, 5*time.Millisecond
	return s, o
}

// Compaction folds each delivery to its outcome and never two deliveries
// of one task into one row; a delivery whose worker died stays started,
// and retention drops it like any other delivery.
func TestCompactKeepsEachDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	a, bb := b.open(t, procA), b.open(t, procB)
	id, err := naming.NewDispatch("r1", "extract", naming.Attempt(1))
	require.NoError(t, err)
	for i, d := range []struct {
		box    *Outbox
		suffix string
		st     outbox.Status
		code   int32
	}{{a, "01", outbox.StatusRetry, 500}, {bb, "02", outbox.StatusBusy, 500}, {a, "03", outbox.StatusDone, 200}, {bb, "04", outbox.StatusDuplicate, 200}} {
		started, outcome := deliveryRecs(id, d.suffix, int32(i), d.st, d.code, t0.Add(time.Duration(i)*time.Second))
		require.NoError(t, outbox.AppendAndWait(ctx, d.box, started))
		require.NoError(t, outbox.AppendAndWait(ctx, d.box, outcome))
	}
	killed, _ := deliveryRecs(id, "05", 4, "", 0, t0.Add(4*time.Second))
	require.NoError(t, outbox.AppendAndWait(ctx, a, killed))
	require.NoError(t, a.Flush(ctx))
	require.NoError(t, bb.Flush(ctx))

	st, err := a.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDeliveries}, Full: true})
	require.NoError(t, err)
	require.Equal(t, [2]int64{9, 5}, [2]int64{st.Tables[0].RowsIn, st.Tables[0].RowsOut})
	got, err := a.Lookup(ctx, outbox.Query{Table: outbox.TableDeliveries, CloudTaskID: id.CloudTaskID(), History: true})
	require.NoError(t, err)
	var rows []string
	for _, r := range got {
		rows = append(rows, fmt.Sprintf("%s %s r%d e%d %d %s %s", r.ID, r.Status, r.Delivery.RetryCount, r.Delivery.ExecutionCount,
			r.Delivery.HTTPStatus, r.Delivery.Latency, r.ProcessorUUID[len(r.ProcessorUUID)-1:]))
	}
	require.Equal(t, []string{
		"dispatch:r1:extract:1#01 retry r0 e0 500 5ms a",
		"dispatch:r1:extract:1#02 busy r1 e1 500 5ms b",
		"dispatch:r1:extract:1#03 done r2 e2 200 5ms a",
		"dispatch:r1:extract:1#04 duplicate r3 e3 200 5ms b",
		"dispatch:r1:extract:1#05 started r4 e4 0 0s a",
	}, rows)

	b.clock.Advance(time.Hour)
	st, err = a.compact(ctx, CompactConfig{Tables: []outbox.Table{outbox.TableDeliveries}, Retention: Retention{"*": time.Minute}})
	require.NoError(t, err)
	require.Equal(t, int64(5), st.Tables[0].Dropped, "every delivery is past retention, the started one too")
}

// joinQueries are docs/outbox.md's queries joining a worker's deliveries
// to the dispatchers' tables, with the two roots put in: latest state per
// ID (and per delivery) first, then the join on the ID column both tables
// name alike.
func joinQueries(dispatchRoot, workerRoot string) []string {
	latest := `WITH dispatches AS (
  SELECT * FROM read_parquet('` + dispatchRoot + `/dispatch_outbox/**/*.parquet', hive_partitioning = true, union_by_name = true)
  WHERE run_id = 'run1' QUALIFY row_number() OVER (PARTITION BY dispatch_id ORDER BY updated_at DESC) = 1),
deliveries AS (
  SELECT * FROM read_parquet('` + workerRoot + `/deliveries/**/*.parquet', hive_partitioning = true, union_by_name = true)
  WHERE run_id = 'run1' QUALIFY row_number() OVER (PARTITION BY delivery_id ORDER BY updated_at DESC) = 1)
`
	return []string{
		latest + `SELECT o.dispatch_id, o.status AS dispatched, d.retry_count, d.status AS delivered, d.http_status, d.latency_us
FROM dispatches o LEFT JOIN deliveries d USING (dispatch_id)
ORDER BY o.dispatch_id, d.delivery_id`,
		latest + `SELECT o.dispatch_id, count(d.delivery_id) AS deliveries,
  count(*) FILTER (WHERE d.status IN ('done', 'duplicate')) AS finished,
  count(*) FILTER (WHERE d.status = 'started') AS unanswered
FROM dispatches o LEFT JOIN deliveries d USING (dispatch_id)
GROUP BY ALL ORDER BY o.dispatch_id`,
		`SELECT t.timer_id, t.kind, d.status AS delivered, d.http_status
FROM (SELECT * FROM read_parquet('` + dispatchRoot + `/timers/**/*.parquet', hive_partitioning = true, union_by_name = true)
      QUALIFY row_number() OVER (PARTITION BY timer_id ORDER BY updated_at DESC) = 1) t
JOIN (SELECT * FROM read_parquet('` + workerRoot + `/deliveries/**/*.parquet', hive_partitioning = true, union_by_name = true)
      QUALIFY row_number() OVER (PARTITION BY delivery_id ORDER BY updated_at DESC) = 1) d USING (timer_id)`,
	}
}

// DuckDB joins a worker's deliveries table, in an outbox root of its own,
// to the dispatchers' dispatch_outbox and timers by internal ID: the
// deliveries table repeats it as dispatch_id or timer_id, so the join is
// USING (dispatch_id). Time budget: under 2 s (node and DuckDB start).
func TestDuckDBJoinsDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o := b.open(t, procA)
	wb := &testBundle{root: t.TempDir(), clock: b.clock, logs: b.logs}
	w := wb.open(t, procB)
	hb := timerRec("run1", "extract", t0.Add(time.Hour), outbox.StatusCreated)
	for _, r := range []outbox.Record{
		dispatchRec("run1", "extract", "1", outbox.StatusCreated), dispatchRec("run1", "load", "1", outbox.StatusCreated),
		dispatchRec("run1", "never", "1", outbox.StatusCreated), hb,
	} {
		require.NoError(t, outbox.AppendAndWait(ctx, o, r))
	}
	timer, err := naming.Parse(hb.ID)
	require.NoError(t, err)
	for _, d := range []struct {
		id     string
		suffix string
		st     outbox.Status
		code   int32
	}{
		{"dispatch:run1:extract:1", "01", outbox.StatusRetry, 500},
		{"dispatch:run1:extract:1", "02", outbox.StatusDone, 200},
		{"dispatch:run1:load:1", "03", "", 0}, // its worker died
		{hb.ID, "04", outbox.StatusDone, 200},
	} {
		id := timer
		if d.id != hb.ID {
			id, err = naming.Parse(d.id)
			require.NoError(t, err)
		}
		started, outcome := deliveryRecs(id, d.suffix, 0, d.st, d.code, b.clock.Now())
		require.NoError(t, outbox.AppendAndWait(ctx, w, started))
		if d.st != "" {
			require.NoError(t, outbox.AppendAndWait(ctx, w, outcome))
		}
		b.clock.Advance(time.Second)
	}
	require.NoError(t, o.Flush(ctx))
	require.NoError(t, w.Flush(ctx))

	got := duckDB(t, joinQueries(b.root, wb.root)...)
	require.Equal(t, []string{
		`[{"dispatch_id":"dispatch:run1:extract:1","dispatched":"created","retry_count":0,"delivered":"retry","http_status":500,"latency_us":"5000"},` +
			`{"dispatch_id":"dispatch:run1:extract:1","dispatched":"created","retry_count":0,"delivered":"done","http_status":200,"latency_us":"5000"},` +
			`{"dispatch_id":"dispatch:run1:load:1","dispatched":"created","retry_count":0,"delivered":"started","http_status":0,"latency_us":"0"},` +
			`{"dispatch_id":"dispatch:run1:never:1","dispatched":"created","retry_count":null,"delivered":null,"http_status":null,"latency_us":null}]`,
		`[{"dispatch_id":"dispatch:run1:extract:1","deliveries":"2","finished":"1","unanswered":"0"},` +
			`{"dispatch_id":"dispatch:run1:load:1","deliveries":"1","finished":"0","unanswered":"1"},` +
			`{"dispatch_id":"dispatch:run1:never:1","deliveries":"0","finished":"0","unanswered":"0"}]`,
		`[{"timer_id":"` + hb.ID + `","kind":"heartbeat","delivered":"done","http_status":200}]`,
	}, got)
}

// A delivery record goes through the log with its four columns and its
// Version, under a format byte of its own; other records carry their
// Version under format 3. Logs written in formats 1 and 2 (before
// versions) read as they did, with Version 0.
func TestDeliveryRecordCodecRoundTrip(t *testing.T) {
	t.Parallel()
	id, err := naming.NewDispatch("run-9", "task.x", naming.Attempt(3))
	require.NoError(t, err)
	_, r := deliveryRecs(id, "019ab6e2", 41, outbox.StatusSlowDown, 503, t0)
	r.Delivery.ExecutionCount = 40
	require.NoError(t, r.Prepare(procA, t0)) // as Append does: the record as the log gets it
	r.Version = 2
	enc := appendRecord(nil, &r)
	require.Equal(t, byte(versionedDelivery), enc[0])
	got, err := decodeRecord(enc)
	require.NoError(t, err)
	require.Equal(t, r, got)
	require.Equal(t, outbox.DeliveryFields{RetryCount: 41, ExecutionCount: 40, HTTPStatus: 503, Latency: 5 * time.Millisecond}, got.Delivery)
	_, err = decodeRecord(enc[:len(enc)-1])
	require.ErrorIs(t, err, errBadRecord)

	d := dispatchRec("run-9", "task.x", "3", outbox.StatusCreated)
	require.NoError(t, d.Prepare(procA, t0))
	d.Version = 7
	encD := appendRecord(nil, &d)
	require.Equal(t, byte(versionedRecord), encD[0])
	gotD, err := decodeRecord(encD)
	require.NoError(t, err)
	require.Equal(t, d, gotD)

	// The formats before versions: the same bytes without the trailing
	// Version.
	for _, c := range []struct {
		rec    outbox.Record
		format byte
	}{{r, deliveryVersion}, {d, recordVersion}} {
		c.rec.Version = 0
		old := appendRecord(nil, &c.rec)
		old = append([]byte{c.format}, old[1:len(old)-1]...)
		got, err := decodeRecord(old)
		require.NoError(t, err)
		require.Equal(t, c.rec, got)
	}
}
