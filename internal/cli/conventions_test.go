package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// The attempt slot is never filled silently: exactly one of --attempt,
// --key and --unique, on the command line and in --from lines.
func TestAttemptSlotIsNeverSilent(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	base := append(append([]string(nil), dispatchArgs...), "--run", "r", "--task", "t", "--url", "https://w/x")
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"none", nil, 2, "", "ctdispatch: the attempt slot is not set; " + errIdentity + "\n"},
		{"attempt and key", []string{"--attempt", "1", "--key", "k"}, 2, "", "ctdispatch: attempt and key exclude each other; " + errIdentity + "\n"},
		{"key and unique", []string{"--key", "k", "--unique"}, 2, "", "ctdispatch: key and unique exclude each other; " + errIdentity + "\n"},
		{"empty key", []string{"--key", ""}, 2, "", "ctdispatch: the key is empty; a caller idempotency key needs at least one character\n"},
		{"attempt 0 given", []string{"--attempt", "0"}, 0, "created dispatch:r:t:0 " + dqQueue + "/tasks/d_", ""},
		{"key", []string{"--key", "evt-42"}, 0, "created dispatch:r:t:k-", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runWithEnv(t, emu.Addr(), "", append(append([]string(nil), base...), tt.args...)...)
			require.Equal(t, tt.stderr, stderr)
			require.True(t, strings.HasPrefix(stdout, tt.stdout), stdout)
			require.Equal(t, tt.code, code)
		})
	}

	// Timers: a retry needs its attempt; a heartbeat has none.
	code, _, stderr := runWithEnv(t, emu.Addr(), "", append(append([]string(nil), timerArgs...), "--run", "r", "--task", "t",
		"--due", "1", "--url", "https://w/x")...)
	require.Equal(t, 2, code)
	require.Equal(t, "ctdispatch: the attempt slot is not set; "+errIdentity+"\n", stderr)
	code, _, stderr = runWithEnv(t, emu.Addr(), "", append(append([]string(nil), timerArgs...), "--run", "r", "--task", "t",
		"--check", "1", "--attempt", "1", "--url", "https://w/x")...)
	require.Equal(t, 2, code)
	require.Equal(t, "ctdispatch: a heartbeat check has no attempt slot; drop --attempt, --key and --unique\n", stderr)
}

// In a --from line, attempt may be a number or a string of digits (what
// ctdispatch id --json prints); the line's identity replaces the flags'.
func TestFromLineAttempt(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	lines := strings.Join([]string{
		`{"run":"f","task":"a","attempt":2}`,
		`{"run":"f","task":"b","attempt":"3"}`,
		`{"run":"f","task":"c"}`,
		`{"run":"f","task":"d","attempt":"03"}`,
		`{"run":"f","task":"e","key":""}`,
		`{"run":"f","task":"g","key":"k","attempt":1}`,
		`{"run":"f","task":"h","attempt":"k-abc"}`,
	}, "\n")
	code, stdout, stderr := runWithEnv(t, emu.Addr(), lines,
		append(append([]string(nil), dispatchArgs...), "--from", "-", "--url", "https://w/x", "--attempt", "9")...)
	require.Equal(t, 1, code)
	require.Equal(t, []string{
		`ctdispatch: line 4: not a request: attempt "03" is not an attempt number; allowed: 0 to 18446744073709551615 without leading zeros, as a number or a string (a caller key goes in "key")`,
		"ctdispatch: line 5: the key is empty; a caller idempotency key needs at least one character",
		"ctdispatch: line 6: attempt and key exclude each other; " + errIdentity,
		`ctdispatch: line 7: not a request: attempt "k-abc" is not an attempt number; allowed: 0 to 18446744073709551615 without leading zeros, as a number or a string (a caller key goes in "key")`,
		"ctdispatch: 4 of the requests failed (reported above)",
	}, strings.Split(strings.TrimSpace(stderr), "\n"))
	var ids []string
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		ids = append(ids, strings.Fields(l)[1])
	}
	require.Equal(t, []string{"dispatch:f:a:2", "dispatch:f:b:3", "dispatch:f:c:9"}, ids, "line c takes --attempt 9")
}

func TestCancelUnknownTimerIsNotFound(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	box := filepath.Join(t.TempDir(), "outbox")
	id := "timer:retry:nobody:t:1:1772368200"
	code, stdout, stderr := runWithEnv(t, emu.Addr(), "", append(append([]string(nil), timerArgs...), "--outbox", box, "--cancel", id, "--json")...)
	require.Equal(t, 1, code)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Equal(t, "not_found", got["outcome"])
	require.Equal(t, fmt.Sprintf("ctdispatch: timer %s not found: no task %s in Cloud Tasks and no record in the outbox %s; nothing recorded\n",
		id, got["task_name"], box), stderr)
	code, _, _ = runCLI(t, "query", "--outbox", box, "--timer-id", id)
	require.Equal(t, 1, code, "no cancelled record was written")
}

// recover: --stale-after 0 takes every pending record, and a record that
// cannot be resolved makes the command exit 1, with --json too.
func TestRecoverStaleAfterZeroAndErrors(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "outbox")
	ctx := context.Background()
	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ProcessorUUID: uuid.Must(uuid.NewV7())})
	require.NoError(t, err)
	id, err := naming.NewDispatch("r", "fresh", naming.Attempt(1))
	require.NoError(t, err)
	require.NoError(t, outbox.AppendAndWait(ctx, box, outbox.Record{Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(),
		Queue: dqQueue, RunID: "r", TaskKey: "fresh", Attempt: "1", Status: outbox.StatusPending}))
	require.NoError(t, box.Close())

	denied, err := emulator.New(emulator.Config{DisableDelivery: true, Queues: []emulator.QueueConfig{{Name: dqQueue}},
		Faults: emulator.Faults{Rules: []emulator.FaultRule{{Methods: []string{"GetTask"}, Rate: 1, Code: codes.PermissionDenied}}}})
	require.NoError(t, err)
	t.Cleanup(func() { denied.Close() })

	// The default age leaves the fresh record alone.
	code, stdout, stderr := runWithEnv(t, denied.Addr(), "", "recover", "--outbox", dir)
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "0 stale pending:"), stdout)

	code, stdout, stderr = runWithEnv(t, denied.Addr(), "", "recover", "--outbox", dir, "--stale-after", "0", "--json")
	require.Equal(t, 1, code)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Equal(t, 1.0, got["stale"])
	require.Equal(t, 1.0, got["errors"])
	require.Equal(t, "ctdispatch: 1 record could not be resolved (left pending for a later run; -v logs why)\n", stderr)
}

func TestRetryPrinter(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	retryPrinter(&buf)(cloudtasks.RetryEvent{Method: "CreateTask", Call: 2, MaxCalls: 10, Code: codes.Unavailable,
		Err: status.Error(codes.Unavailable, "connection error:\n reset"), Delay: 212345 * time.Microsecond})
	require.Equal(t, "retrying CreateTask (3/10) in 212ms: Unavailable: connection error: reset\n", buf.String())
}

// Without -v a failed command prints its error alone; -v adds the
// library's log lines before it.
func TestVerboseAddsLogLines(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	args := append(append([]string(nil), dispatchArgs...), "--run", "r", "--task", "t", "--attempt", "1",
		"--url", "https://w/x", "--queue", "nope")
	code, _, quiet := runWithEnv(t, emu.Addr(), "", args...)
	require.Equal(t, 1, code)
	require.Len(t, strings.Split(strings.TrimSpace(quiet), "\n"), 1, quiet)
	code, _, loud := runWithEnv(t, emu.Addr(), "", append(args, "-v")...)
	require.Equal(t, 1, code)
	lines := strings.Split(strings.TrimSpace(loud), "\n")
	require.Greater(t, len(lines), 1, loud)
	require.Contains(t, lines[0], "level=")
	require.Equal(t, strings.TrimSpace(quiet), lines[len(lines)-1])
}
