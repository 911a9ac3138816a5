package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// Time budget: under 1 s.

const workerProc = "00000000-0000-4000-8000-0000000000bb"

// seedWorkerOutbox writes a worker's outbox beside seedOutbox's: two
// deliveries of dispatch:run1:extract:1 (a retry, then done), and one of
// dispatch:run1:load:2 whose worker died (started only).
func seedWorkerOutbox(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(cliT0.Add(time.Minute))
	o, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ProcessorUUID: uuid.MustParse(workerProc), Clock: clock})
	require.NoError(t, err)
	deliver := func(run, task, attempt, suffix string, retries int32, st outbox.Status, code int32) {
		id, err := naming.Parse("dispatch:" + run + ":" + task + ":" + attempt)
		require.NoError(t, err)
		r := outbox.DeliveryRecordOf(id, suffix)
		r.Queue, r.Status, r.Delivery.RetryCount, r.Delivery.ExecutionCount = "orders", outbox.StatusStarted, retries, retries
		require.NoError(t, outbox.AppendAndWait(ctx, o, r))
		if st != "" {
			clock.Advance(250 * time.Millisecond)
			r.Status, r.UpdatedAt, r.Delivery.HTTPStatus, r.Delivery.Latency = st, clock.Now(), code, 250*time.Millisecond
			require.NoError(t, outbox.AppendAndWait(ctx, o, r))
		}
		clock.Advance(time.Second)
	}
	deliver("run1", "extract", "1", "a", 0, outbox.StatusRetry, 500)
	deliver("run1", "extract", "1", "b", 1, outbox.StatusDone, 200)
	deliver("run1", "load", "2", "c", 0, "", 0)
	require.NoError(t, o.Close())
	return dir
}

// query takes the dispatchers' outbox and a worker's, and shows an ID's
// (a task's, a run's) deliveries after its records.
func TestQueryWithAWorkersOutbox(t *testing.T) {
	t.Parallel()
	dir, wdir := seedOutbox(t), seedWorkerOutbox(t)
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{
			name: "an ID's record, then its deliveries",
			args: []string{"query", "--outbox", dir, "--worker-outbox", wdir, "--dispatch-id", "dispatch:run1:extract:1"},
			wantStdout: "ID                       STATUS   CLOUD TASK ID                 ERROR  CALLS  UPDATED AT                   DUE AT  PROCESSOR                             TRACE ID\n" +
				"dispatch:run1:extract:1  created  d_cxtoltqhbncw6nevn7hy53kqn6  -      1      2026-03-01T12:00:01.500000Z  -       " + cliProc + "  -\n" +
				"\n" +
				"DELIVERY ID                STATUS  HTTP  RETRY  EXEC  LATENCY  ARRIVED AT                   UPDATED AT                   PROCESSOR                             TRACE ID\n" +
				"dispatch:run1:extract:1#a  retry   500   0      0     250ms    2026-03-01T12:01:00.000000Z  2026-03-01T12:01:00.250000Z  " + workerProc + "  -\n" +
				"dispatch:run1:extract:1#b  done    200   1      1     250ms    2026-03-01T12:01:01.250000Z  2026-03-01T12:01:01.500000Z  " + workerProc + "  -\n",
		},
		{
			name: "a run's deliveries with history, worker's outbox alone",
			args: []string{"query", "--worker-outbox", wdir, "--run", "run1", "--history"},
			wantStdout: "DELIVERY ID                STATUS   HTTP  RETRY  EXEC  LATENCY  ARRIVED AT                   UPDATED AT                   PROCESSOR                             TRACE ID\n" +
				"dispatch:run1:extract:1#a  started  -     0      0     0s       2026-03-01T12:01:00.000000Z  2026-03-01T12:01:00.000000Z  " + workerProc + "  -\n" +
				"dispatch:run1:extract:1#a  retry    500   0      0     250ms    2026-03-01T12:01:00.000000Z  2026-03-01T12:01:00.250000Z  " + workerProc + "  -\n" +
				"dispatch:run1:extract:1#b  started  -     1      1     0s       2026-03-01T12:01:01.250000Z  2026-03-01T12:01:01.250000Z  " + workerProc + "  -\n" +
				"dispatch:run1:extract:1#b  done     200   1      1     250ms    2026-03-01T12:01:01.250000Z  2026-03-01T12:01:01.500000Z  " + workerProc + "  -\n" +
				"dispatch:run1:load:2#c     started  -     0      0     0s       2026-03-01T12:01:02.500000Z  2026-03-01T12:01:02.500000Z  " + workerProc + "  -\n",
		},
		{
			name: "a task's deliveries as JSON",
			args: []string{"query", "--outbox", dir, "--worker-outbox", wdir, "--cloud-task-id", "d_jbmde3fgfum6suqbrrywrudv7g", "--format", "json"},
			wantStdout: `{"table":"dispatch_outbox","id":"dispatch:run1:load:2","cloud_task_id":"d_jbmde3fgfum6suqbrrywrudv7g","task_name":"` + cliQueue +
				`/tasks/d_jbmde3fgfum6suqbrrywrudv7g","queue":"` + cliQueue + `","run_id":"run1","task_key":"load","attempt":"2","kind":"dispatch",` +
				`"status":"failed","error_code":"PermissionDenied","create_calls":3,"payload_sha256":"","processor_uuid":"` + cliProc + `",` +
				`"created_at":"2026-03-01T12:00:01.500000Z","updated_at":"2026-03-01T12:00:01.500000Z"}` + "\n" +
				`{"table":"deliveries","id":"dispatch:run1:load:2#c","cloud_task_id":"d_jbmde3fgfum6suqbrrywrudv7g","task_name":"","queue":"orders",` +
				`"run_id":"run1","task_key":"load","attempt":"2","kind":"dispatch","status":"started","error_code":"","create_calls":0,"payload_sha256":"",` +
				`"processor_uuid":"` + workerProc + `","created_at":"2026-03-01T12:01:02.500000Z","updated_at":"2026-03-01T12:01:02.500000Z",` +
				`"retry_count":0,"execution_count":0,"http_status":0,"latency_us":0}` + "\n",
		},
		{
			name: "CSV gains the delivery columns",
			args: []string{"query", "--worker-outbox", wdir, "--dispatch-id", "dispatch:run1:extract:1", "--format", "csv"},
			wantStdout: strings.Join(append(csvHeader, csvDeliveryHeader...), ",") + "\n" +
				"deliveries,dispatch:run1:extract:1#a,d_cxtoltqhbncw6nevn7hy53kqn6,,orders,run1,extract,1,dispatch,retry,,0,," + workerProc +
				",2026-03-01T12:01:00.000000Z,2026-03-01T12:01:00.250000Z,,,,0,0,500,250000\n" +
				"deliveries,dispatch:run1:extract:1#b,d_cxtoltqhbncw6nevn7hy53kqn6,,orders,run1,extract,1,dispatch,done,,0,," + workerProc +
				",2026-03-01T12:01:01.250000Z,2026-03-01T12:01:01.500000Z,,,,1,1,200,250000\n",
		},
		{
			name:       "nothing in either",
			args:       []string{"query", "--outbox", dir, "--worker-outbox", wdir, "--dispatch-id", "dispatch:run1:extract:9"},
			wantCode:   1,
			wantStderr: "ctdispatch: no record with dispatch_id \"dispatch:run1:extract:9\" in " + dir + " or " + wdir + "\n",
		},
		{
			name:       "not an internal ID",
			args:       []string{"query", "--outbox", dir, "--worker-outbox", wdir, "--dispatch-id", "order-7"},
			wantCode:   1,
			wantStderr: "ctdispatch: no record with dispatch_id \"order-7\" in " + dir + " or " + wdir + "\n",
		},
		{
			name:       "a worker's outbox given as the dispatchers' shows no deliveries among the records",
			args:       []string{"query", "--outbox", wdir, "--run", "run1"},
			wantCode:   1,
			wantStderr: "ctdispatch: no record with run_id \"run1\" in " + wdir + "\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, tc.args...)
			require.Equal(t, tc.wantStderr, stderr)
			require.Equal(t, tc.wantStdout, stdout)
			require.Equal(t, tc.wantCode, code)
		})
	}
}
