package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

const (
	cliQueue = "projects/p/locations/l/queues/orders"
	cliProc  = "00000000-0000-4000-8000-0000000000aa"
)

var cliT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// seedOutbox writes a small outbox: one dispatch with a pending and a
// created state, one failed dispatch, and one retry timer, all in Parquet.
func seedOutbox(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(cliT0)
	o, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ProcessorUUID: uuid.MustParse(cliProc), Clock: clock})
	require.NoError(t, err)
	d := outbox.Record{Table: outbox.TableDispatch, ID: "dispatch:run1:extract:1", CloudTaskID: "d_cxtoltqhbncw6nevn7hy53kqn6",
		Queue: cliQueue, RunID: "run1", TaskKey: "extract", Attempt: "1", Status: outbox.StatusPending, PayloadSHA256: "ab"}
	require.NoError(t, outbox.AppendAndWait(ctx, o, d))
	clock.Advance(1500 * time.Millisecond)
	d.Status, d.CreateCalls = outbox.StatusCreated, 1
	require.NoError(t, outbox.AppendAndWait(ctx, o, d))
	f := outbox.Record{Table: outbox.TableDispatch, ID: "dispatch:run1:load:2", CloudTaskID: "d_jbmde3fgfum6suqbrrywrudv7g",
		Queue: cliQueue, RunID: "run1", TaskKey: "load", Attempt: "2", Status: outbox.StatusFailed, ErrorCode: "PermissionDenied", CreateCalls: 3}
	require.NoError(t, outbox.AppendAndWait(ctx, o, f))
	tm := outbox.Record{Table: outbox.TableTimers, ID: "timer:retry:run1:extract:1:1772370000", CloudTaskID: "t_r36kq5aw4etqdihtwlvv5mky3q",
		Queue: cliQueue, RunID: "run1", TaskKey: "extract", Attempt: "1", Kind: "retry", Status: outbox.StatusCreated,
		CreateCalls: 1, DueAt: time.Unix(1772370000, 0)}
	require.NoError(t, outbox.AppendAndWait(ctx, o, tm))
	require.NoError(t, o.Close())
	return dir
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, Env{Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

func TestQueryCommand(t *testing.T) {
	t.Parallel()
	dir := seedOutbox(t)
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{
			name: "latest state by dispatch ID",
			args: []string{"query", "--outbox", dir, "--dispatch-id", "dispatch:run1:extract:1"},
			wantStdout: "ID                       STATUS   CLOUD TASK ID                 ERROR  CALLS  UPDATED AT                   DUE AT  PROCESSOR                             TRACE ID\n" +
				"dispatch:run1:extract:1  created  d_cxtoltqhbncw6nevn7hy53kqn6  -      1      2026-03-01T12:00:01.500000Z  -       " + cliProc + "  -\n",
		},
		{
			name: "history as CSV",
			args: []string{"query", "--outbox", dir, "--cloud-task-id", "d_cxtoltqhbncw6nevn7hy53kqn6", "--history", "--format", "csv"},
			wantStdout: strings.Join(csvHeader, ",") + "\n" +
				"dispatch_outbox,dispatch:run1:extract:1,d_cxtoltqhbncw6nevn7hy53kqn6," + cliQueue + "/tasks/d_cxtoltqhbncw6nevn7hy53kqn6," + cliQueue + ",run1,extract,1,dispatch,pending,,0,ab," + cliProc + ",2026-03-01T12:00:00.000000Z,2026-03-01T12:00:00.000000Z,,,\n" +
				"dispatch_outbox,dispatch:run1:extract:1,d_cxtoltqhbncw6nevn7hy53kqn6," + cliQueue + "/tasks/d_cxtoltqhbncw6nevn7hy53kqn6," + cliQueue + ",run1,extract,1,dispatch,created,,1,ab," + cliProc + ",2026-03-01T12:00:00.000000Z,2026-03-01T12:00:01.500000Z,,,\n",
		},
		{
			name: "timer as JSON",
			args: []string{"query", "--outbox", dir, "--timer-id", "timer:retry:run1:extract:1:1772370000", "--format", "json"},
			wantStdout: `{"table":"timers","id":"timer:retry:run1:extract:1:1772370000","cloud_task_id":"t_r36kq5aw4etqdihtwlvv5mky3q",` +
				`"task_name":"` + cliQueue + `/tasks/t_r36kq5aw4etqdihtwlvv5mky3q","queue":"` + cliQueue + `","run_id":"run1","task_key":"extract",` +
				`"attempt":"1","kind":"retry","status":"created","error_code":"","create_calls":1,"payload_sha256":"","processor_uuid":"` + cliProc + `",` +
				`"created_at":"2026-03-01T12:00:01.500000Z","updated_at":"2026-03-01T12:00:01.500000Z","due_at":"2026-03-01T13:00:00.000000Z"}` + "\n",
		},
		{
			name: "whole run",
			args: []string{"query", "--outbox", dir, "--run", "run1"},
			wantStdout: "ID                                     STATUS   CLOUD TASK ID                 ERROR             CALLS  UPDATED AT                   DUE AT                       PROCESSOR                             TRACE ID\n" +
				"dispatch:run1:extract:1                created  d_cxtoltqhbncw6nevn7hy53kqn6  -                 1      2026-03-01T12:00:01.500000Z  -                            " + cliProc + "  -\n" +
				"dispatch:run1:load:2                   failed   d_jbmde3fgfum6suqbrrywrudv7g  PermissionDenied  3      2026-03-01T12:00:01.500000Z  -                            " + cliProc + "  -\n" +
				"timer:retry:run1:extract:1:1772370000  created  t_r36kq5aw4etqdihtwlvv5mky3q  -                 1      2026-03-01T12:00:01.500000Z  2026-03-01T13:00:00.000000Z  " + cliProc + "  -\n",
		},
		{
			name:       "nothing matches",
			args:       []string{"query", "--outbox", dir, "--dispatch-id", "dispatch:run1:extract:9"},
			wantCode:   1,
			wantStderr: "ctdispatch: no record with dispatch_id \"dispatch:run1:extract:9\" in " + dir + "\n",
		},
		{
			name:       "two selectors",
			args:       []string{"query", "--outbox", dir, "--run", "a", "--dispatch-id", "b"},
			wantCode:   2,
			wantStderr: "ctdispatch: give exactly one of --dispatch-id, --timer-id, --cloud-task-id, --run\n",
		},
		{
			name:       "bad format",
			args:       []string{"query", "--outbox", dir, "--run", "a", "--format", "xml"},
			wantCode:   2,
			wantStderr: "ctdispatch: --format \"xml\" unknown; allowed: table, json, csv\n",
		},
		{
			name:       "missing outbox flag",
			args:       []string{"query", "--run", "a"},
			wantCode:   2,
			wantStderr: "ctdispatch: --outbox DIR is required (or --worker-outbox DIR for deliveries only)\n",
		},
		{
			name:       "outbox does not exist",
			args:       []string{"query", "--outbox", filepath.Join(dir, "nope"), "--run", "a"},
			wantCode:   1,
			wantStderr: "ctdispatch: outbox " + filepath.Join(dir, "nope") + ": stat " + filepath.Join(dir, "nope") + ": no such file or directory\n",
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

func TestQueryReportsDamagedFilesAndGoesOn(t *testing.T) {
	t.Parallel()
	dir := seedOutbox(t)
	bad := filepath.Join(dir, "dispatch_outbox", "created_date=2026-03-01", "broken.parquet")
	require.NoError(t, os.WriteFile(bad, []byte("PAR1 not really"), 0o600))
	code, stdout, stderr := runCLI(t, "query", "--outbox", dir, "--dispatch-id", "dispatch:run1:load:2", "--format", "json")
	require.Equal(t, 3, code, "an answer that may be incomplete exits 3")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], `"status":"failed"`)
	var skipped map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &skipped))
	require.Equal(t, bad, skipped["skipped_file"])
	require.Equal(t, true, skipped["damaged"])
	require.True(t, strings.HasPrefix(skipped["reason"].(string), "not a readable Parquet file"), skipped["reason"])
	require.Equal(t, "ctdispatch: the answer may be incomplete: 1 file skipped (damaged or foreign): "+bad+" (not a readable Parquet file)\n", stderr)

	// No match at all: the record may be in the skipped file, so 3 again.
	code, stdout, stderr = runCLI(t, "query", "--outbox", dir, "--dispatch-id", "dispatch:run1:nope:1")
	require.Equal(t, 3, code)
	require.Empty(t, stdout)
	require.Equal(t, "ctdispatch: no record with dispatch_id \"dispatch:run1:nope:1\" in "+dir+
		"; the answer may be incomplete: 1 file skipped (damaged or foreign): "+bad+" (not a readable Parquet file)\n", stderr)
}

func TestQueryBucketURL(t *testing.T) {
	t.Parallel()
	// mem:// opens an empty bucket: the command runs and finds nothing.
	code, stdout, stderr := runCLI(t, "query", "--outbox", "mem://", "--run", "run1")
	require.Equal(t, 1, code)
	require.Equal(t, "", stdout)
	require.Equal(t, "ctdispatch: no record with run_id \"run1\" in mem://\n", stderr)
}

// countingWriter counts the write calls made to it.
type countingWriter struct {
	bytes.Buffer
	calls int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.calls++
	return w.Buffer.Write(p)
}

// TestQueryOutputIsOneWrite checks that records are printed in one write
// call in every format: a query's output goes straight to a terminal or a
// pipe, where each call is a system call.
func TestQueryOutputIsOneWrite(t *testing.T) {
	t.Parallel()
	recs := []outbox.Record{
		{Table: outbox.TableDispatch, ID: "dispatch:run1:extract:1", CloudTaskID: "d_x", Status: outbox.StatusCreated, CreateCalls: 1, UpdatedAt: cliT0, ProcessorUUID: cliProc},
		{Table: outbox.TableDispatch, ID: "dispatch:run1:load:1", CloudTaskID: "d_y", Status: outbox.StatusFailed, ErrorCode: "PERMISSION_DENIED", UpdatedAt: cliT0, ProcessorUUID: cliProc},
	}
	for _, format := range []string{"table", "json", "csv"} {
		var w countingWriter
		require.NoError(t, writeRecords(&w, format, recs, false, nil))
		require.Equal(t, 1, w.calls, format)
		require.Contains(t, w.String(), "dispatch:run1:load:1", format)
	}
}
