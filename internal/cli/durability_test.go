package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// --durability picks how the outbox records; every mode answers and
// records the same, and a mode without an outbox, or an unknown one, is a
// usage error naming the flag.
func TestDispatchDurabilityFlag(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	for i, mode := range []string{"overlapped", "strict", "interval"} {
		dir := filepath.Join(t.TempDir(), "outbox")
		args := append(append([]string(nil), dispatchArgs...), "--outbox", dir, "--durability", mode,
			"--run", "run-"+mode, "--task", "t", "--attempt", fmt.Sprint(i), "--url", "https://worker.example/x")
		for _, want := range []string{"created", "already_existed"} {
			code, stdout, stderr := runWithEnv(t, emu.Addr(), "", args...)
			require.Equal(t, 0, code, stderr)
			require.True(t, strings.HasPrefix(stdout, want+" dispatch:run-"+mode+":t:"), stdout)
		}
		code, stdout, _ := runCLI(t, "query", "--outbox", dir, "--run", "run-"+mode, "--format", "json")
		require.Equal(t, 0, code)
		require.Contains(t, stdout, `"status":"created"`)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--durability", "fast", "--outbox", t.TempDir()}, `ctdispatch: --durability "fast": allowed: overlapped, strict, interval`},
		{[]string{"--durability", "strict"}, "ctdispatch: --durability strict needs --outbox DIR"},
	} {
		args := append(append(append([]string(nil), dispatchArgs...), tt.args...), "--run", "r", "--task", "t", "--attempt", "0", "--url", "https://worker.example/x")
		code, stdout, stderr := runWithEnv(t, emu.Addr(), "", args...)
		require.Equal(t, 2, code, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, tt.want)
	}
	require.Equal(t, 3, emu.TaskCount())
}

// --batch with --from: concurrent lines share BatchCreateTasks calls and
// each line still gets its own outcome, in input order.
func TestDispatchBatchFlag(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	dir := t.TempDir()
	var lines strings.Builder
	for i := range 200 {
		fmt.Fprintf(&lines, `{"run":"batch","task":"t","attempt":%d}`+"\n", i%150)
	}
	from := filepath.Join(dir, "requests.jsonl")
	require.NoError(t, os.WriteFile(from, []byte(lines.String()), 0o600))
	args := append(append([]string(nil), dispatchArgs...), "--outbox", filepath.Join(dir, "outbox"), "--batch", "--batch-in-flight", "2",
		"--concurrency", "32", "--url", "https://worker.example/x", "--from", from)
	code, stdout, stderr := runWithEnv(t, emu.Addr(), "", args...)
	require.Equal(t, 0, code, stderr)
	requireBatchAnswers(t, stdout, "batch", 200, 150)
	require.Equal(t, 150, emu.TaskCount())
}

// --batch-in-flight below 1 is a usage error that names the flag.
func TestDispatchBatchInFlightMustBePositive(t *testing.T) {
	t.Parallel()
	args := append(append([]string(nil), dispatchArgs...), "--batch", "--batch-in-flight", "0", "--run", "r", "--task", "t", "--attempt", "1", "--url", "https://worker.example/x")
	code, _, stderr := runWithEnv(t, "127.0.0.1:1", "", args...)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "--batch-in-flight 0 must be at least 1")
}

// The built binary with --batch and one request in flight per queue,
// reading a pipe: every line gets its own answer in input order, repeats
// are already_existed, a malformed line fails alone with its number.
func TestBatchedDispatchThroughBinary(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	var lines strings.Builder
	for i := range 120 {
		fmt.Fprintf(&lines, `{"run":"bin","task":"t","attempt":%d}`+"\n", i%100)
	}
	lines.WriteString("{not json\n")
	args := append(append([]string(nil), dispatchArgs...), "--outbox", filepath.Join(t.TempDir(), "outbox"),
		"--batch", "--batch-in-flight", "1", "--concurrency", "16", "--url", "https://worker.example/x", "--from", "-")
	res := runBinary(t, []string{emulatorEnv + "=" + emu.Addr()}, lines.String(), args...)
	require.Equal(t, 1, res.code, res.stderr)
	requireBatchAnswers(t, res.stdout, "bin", 120, 100)
	require.Contains(t, res.stderr, "ctdispatch: line 121: not a request")
	require.Equal(t, 100, emu.TaskCount())
}

// requireBatchAnswers asserts stdout answers n lines of run, attempt i%distinct
// on line i, in order: created the first time, already_existed after.
func requireBatchAnswers(t *testing.T, stdout, run string, n, distinct int) {
	t.Helper()
	out := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, out, n)
	for i, line := range out {
		want := "created"
		if i >= distinct {
			want = "already_existed"
		}
		require.True(t, strings.HasPrefix(line, fmt.Sprintf("%s dispatch:%s:t:%d ", want, run, i%distinct)), line)
	}
}
