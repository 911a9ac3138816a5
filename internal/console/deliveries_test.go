package console

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// Time budget: under 2 s (one fixture of setup's, plus a worker's outbox).

var workerProc = uuid.MustParse("cccccccc-0000-4000-8000-000000000003")

// seedWorkerOutbox writes a worker's outbox: extract delivered once
// (done), transform twice (a retry, then one whose worker died: started
// only), the retry timer once (a duplicate).
func seedWorkerOutbox(t *testing.T, ids map[string]naming.ID) string {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(t0.Add(time.Minute))
	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ProcessorUUID: workerProc, Clock: clock})
	require.NoError(t, err)
	for _, d := range []struct {
		key, suffix string
		retries     int32
		st          outbox.Status
		code        int32
	}{
		{"extract", "1", 0, outbox.StatusDone, 200},
		{"transform", "2", 0, outbox.StatusRetry, 500},
		{"transform", "3", 1, "", 0},
		{"retry", "4", 0, outbox.StatusDuplicate, 200},
	} {
		r := outbox.DeliveryRecordOf(ids[d.key], d.suffix)
		r.Queue, r.Status, r.Delivery.RetryCount = "work", outbox.StatusStarted, d.retries
		require.NoError(t, outbox.AppendAndWait(ctx, box, r))
		if d.st != "" {
			r.Status, r.UpdatedAt, r.Delivery.HTTPStatus, r.Delivery.Latency = d.st, clock.Now().Add(12*time.Millisecond), d.code, 12*time.Millisecond
			require.NoError(t, outbox.AppendAndWait(ctx, box, r))
		}
		clock.Advance(time.Second)
	}
	require.NoError(t, box.Close())
	return dir
}

// With a worker's outbox beside the dispatchers', an ID's audit trail and
// its run's page list its deliveries: one row per delivery, its outcome or
// started when its worker never answered.
func TestIDAndRunPagesShowDeliveries(t *testing.T) {
	t.Parallel()
	ids := map[string]naming.ID{}
	for _, key := range []string{"extract", "transform"} {
		id, err := naming.NewDispatch("run-1", key, naming.Attempt(1))
		require.NoError(t, err)
		ids[key] = id
	}
	retry, err := naming.NewRetryTimer("run-1", "transform", naming.Attempt(2), t0.Add(2*time.Minute))
	require.NoError(t, err)
	ids["retry"] = retry
	b := setup(t, Config{WorkerOutbox: seedWorkerOutbox(t, ids)})
	proc := workerProc.String()
	transform := ids["transform"].String()

	for _, q := range []string{transform, ids["transform"].CloudTaskID()} {
		code, page := b.get(t, "/audit?q="+url.QueryEscape(q))
		require.Equal(t, http.StatusOK, code, q)
		require.Equal(t, [][]string{
			{transform + "#2", "retry", "500", "0", "0", "12ms", "2026-11-23 10:01:01.000", proc, "—"},
			{transform + "#3", "started", "—", "1", "0", "—", "2026-11-23 10:01:02.000", proc, "—"},
		}, rows(t, page, "worker-deliveries"), q)
		require.Contains(t, page, `<a href="/audit?q=dispatch%3arun-1%3atransform%3a1&amp;by=id"><code>`+transform+`#2</code></a>`)
		require.Contains(t, page, `· worker outbox: <code>`)
	}
	code, page := b.get(t, "/audit?q=dispatch:run-1:load:1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "No deliveries recorded.", "load was recorded by the dispatcher and never delivered")
	code, page = b.get(t, "/audit?q=nothing-here&by=id")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `Nothing recorded for <code>nothing-here</code>.`)

	code, page = b.get(t, "/run?id=run-1")
	require.Equal(t, http.StatusOK, code)
	require.Len(t, rows(t, page, "run"), 4, "the dispatcher's records, as without a worker's outbox")
	require.Equal(t, [][]string{
		{ids["extract"].String() + "#1", "done", "200", "0", "0", "12ms", "2026-11-23 10:01:00.000", proc, "—"},
		{transform + "#2", "retry", "500", "0", "0", "12ms", "2026-11-23 10:01:01.000", proc, "—"},
		{transform + "#3", "started", "—", "1", "0", "—", "2026-11-23 10:01:02.000", proc, "—"},
		{retry.String() + "#4", "duplicate", "200", "0", "0", "12ms", "2026-11-23 10:01:03.000", proc, "—"},
	}, rows(t, page, "worker-deliveries"))
}

// Without a worker's outbox the pages have no deliveries section at all.
func TestNoWorkerOutboxNoDeliveriesSection(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	_, page := b.get(t, "/run?id=run-1")
	require.NotContains(t, page, "worker-deliveries")
	_, page = b.get(t, "/audit?q=dispatch:run-1:load:1")
	require.NotContains(t, page, "worker-deliveries")
}
