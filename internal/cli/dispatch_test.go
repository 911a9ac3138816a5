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

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

const dqQueue = "projects/p/locations/europe-west1/queues/work"

// startCLIEmulator starts a store-only emulator with the queue the CLI
// tests use.
func startCLIEmulator(t *testing.T) *emulator.Server {
	t.Helper()
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Queues: []emulator.QueueConfig{{Name: dqQueue}}})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	return emu
}

// runWithEnv runs the CLI with CLOUD_TASKS_EMULATOR_HOST set to addr.
func runWithEnv(t *testing.T, addr, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := Env{Out: &out, Err: &errb, In: strings.NewReader(stdin), Getenv: func(k string) string {
		if k == emulatorEnv {
			return addr
		}
		return ""
	}}
	code := Run(context.Background(), args, env)
	return code, out.String(), errb.String()
}

var dispatchArgs = []string{"dispatch", "--project", "p", "--location", "europe-west1", "--queue", "work"}

func TestDispatchCommand(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	dir := t.TempDir()
	bodyFile := filepath.Join(dir, "body.json")
	require.NoError(t, os.WriteFile(bodyFile, []byte(`{"table":"orders"}`), 0o600))
	args := append(append([]string(nil), dispatchArgs...), "--outbox", filepath.Join(dir, "outbox"),
		"--run", "run1", "--task", "extract", "--attempt", "1", "--url", "https://worker.example/x",
		"--header", "Content-Type=application/json", "--body", "@"+bodyFile, "--json")

	var outcomes []string
	for range 2 {
		code, stdout, stderr := runWithEnv(t, emu.Addr(), "", args...)
		require.Equal(t, 0, code, stderr)
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &got))
		require.Equal(t, "dispatch:run1:extract:1", got["dispatch_id"])
		require.Equal(t, dqQueue+"/tasks/"+got["cloud_task_id"].(string), got["task_name"])
		outcomes = append(outcomes, got["outcome"].(string))
	}
	require.Equal(t, []string{"created", "already_existed"}, outcomes)
	tasks := emu.Tasks(dqQueue)
	require.Len(t, tasks, 1)
	hr := tasks[0].GetHttpRequest()
	require.Equal(t, `{"table":"orders"}`, string(hr.GetBody()))
	require.Equal(t, "application/json", hr.GetHeaders()["Content-Type"])
	require.Equal(t, "dispatch:run1:extract:1", hr.GetHeaders()["Idempotency-Key"])

	// The outbox recorded it: query finds the dispatch.
	code, stdout, _ := runCLI(t, "query", "--outbox", filepath.Join(dir, "outbox"), "--dispatch-id", "dispatch:run1:extract:1", "--format", "json")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, `"status":"created"`)
}

func TestDispatchCommandErrors(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no run", []string{"--url", "https://w/x"}, 2, "ctdispatch: --run and --task are required (or --from FILE)\n"},
		{"no url", []string{"--run", "r", "--task", "t"}, 2, "ctdispatch: --url is required\n"},
		{"bad header", []string{"--run", "r", "--task", "t", "--url", "https://w/x", "--header", "nope"}, 2, "ctdispatch: --header \"nope\": want K=V\n"},
		{"body with GET", []string{"--run", "r", "--task", "t", "--attempt", "1", "--url", "https://w/x", "--method", "GET", "--body", "x"}, 1,
			"ctdispatch: cloudtasks: Body \"1 bytes\" is only allowed with POST, PUT or PATCH; method is GET\n"},
		{"missing queue", []string{"--run", "r", "--task", "t", "--attempt", "1", "--url", "https://w/x", "--queue", "nope"}, 1,
			"ctdispatch: cloudtasks: CreateTask dispatch:r:t:1 failed: NotFound: "},
		{"separator", []string{"--run", "a:b", "--task", "t", "--attempt", "1", "--url", "https://w/x"}, 1,
			"ctdispatch: cloudtasks: RunID \"a:b\" contains ':'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runWithEnv(t, emu.Addr(), "", append(append([]string(nil), dispatchArgs...), tt.args...)...)
			require.Equal(t, tt.code, code)
			require.Empty(t, stdout)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			require.Len(t, lines, 1, "an error is one line, no log lines beside it: %q", stderr)
			require.True(t, strings.HasPrefix(lines[0]+"\n", tt.stderr), "stderr %q", stderr)
		})
	}
}

func TestDispatchCommandFrom(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	lines := strings.Join([]string{
		`{"run":"run2","task":"a","attempt":1}`,
		`{"run":"run2","task":"b","attempt":1,"body_json":{"x":1}}`,
		``,
		`{"run":"run2","task":"a","attempt":1}`,
		`{"run":"run2","task":"c","key":"evt-7","headers":{"X-Trace":"t1"}}`,
		`{"run":"run2","task":"bad:key","attempt":1}`,
		`not json`,
	}, "\n")
	code, stdout, stderr := runWithEnv(t, emu.Addr(), lines,
		append(append([]string(nil), dispatchArgs...), "--from", "-", "--url", "https://worker.example/x")...)
	require.Equal(t, 1, code)
	require.Equal(t, []string{
		"ctdispatch: line 6: cloudtasks: TaskKey \"bad:key\" contains ':' (the separator); allowed: [A-Za-z0-9._-]",
		"ctdispatch: line 7: not a request: invalid character 'o' in literal null (expecting 'u')",
		"ctdispatch: 2 of the requests failed (reported above)",
	}, strings.Split(strings.TrimSpace(stderr), "\n"))
	out := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, out, 4)
	// Lines 1 and 4 are the same request, in flight together: one creates.
	first, _, _ := strings.Cut(out[0], " ")
	again, _, _ := strings.Cut(out[2], " ")
	require.ElementsMatch(t, []string{"created", "already_existed"}, []string{first, again})
	require.True(t, strings.HasSuffix(out[0], " dispatch:run2:a:1 "+dqQueue+"/tasks/d_"+out[0][len(out[0])-26:]), out[0])
	require.True(t, strings.HasPrefix(out[1], "created dispatch:run2:b:1 "), out[1])
	require.Regexp(t, `^created dispatch:run2:c:k-[a-z2-7]{26} `, out[3])
	require.Len(t, emu.Tasks(dqQueue), 3)
}

func TestLineProgress(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	clock := clockwork.NewFakeClockAt(cliT0)
	p := &lineProgress{w: &buf, total: 4, now: clock.Now}
	p.update(1)
	p.update(2) // within 100ms: skipped
	clock.Advance(time.Second)
	p.update(3)
	p.update(4) // the last one is always drawn
	p.finish()
	require.Equal(t, "\r[#######                       ]  25% 1/4 requests"+
		"\r[######################        ]  75% 3/4 requests"+
		"\r[##############################] 100% 4/4 requests\n", buf.String())

	buf.Reset()
	p = &lineProgress{w: &buf, total: -1, now: clock.Now}
	p.update(7)
	p.finish()
	require.Equal(t, "\r7 requests\n", buf.String())
}
