package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// startEmulatorCmd runs `ctdispatch emulator args...` in-process and
// returns its first output lines' address, a stop function that cancels
// it and returns its exit code and the rest of its output.
func startEmulatorCmd(t *testing.T, getenv func(string) string, args ...string) (addr string, lines []string, stop func() (code int, out, errOut string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var errBuf bytes.Buffer
	done := make(chan int, 1)
	go func() {
		code := Run(ctx, append([]string{"emulator"}, args...), Env{Out: pw, Err: &errBuf, Getenv: getenv})
		pw.Close()
		done <- code
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "OIDC keys:") {
			break
		}
	}
	require.NotEmpty(t, lines, "no output; stderr: %s", errBuf.String())
	addr = strings.TrimPrefix(lines[0], "Cloud Tasks emulator listening on ")
	stop = func() (int, string, string) {
		cancel()
		rest, _ := io.ReadAll(pr)
		code := <-done
		return code, string(rest), errBuf.String() // the command has returned: no more writes
	}
	t.Cleanup(func() { cancel() })
	return addr, lines, stop
}

func TestEmulatorCommandServesUntilCancelled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "emulator.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(`
name_reuse_window: 1h
queues:
  - name: projects/p/locations/l/queues/slow
    max_dispatches_per_second: 2
    max_attempts: 5
    min_backoff: 1s
`), 0o600))
	addr, lines, stop := startEmulatorCmd(t, nil, "--addr", "127.0.0.1:0", "--queue", "projects/p/locations/l/queues/q", "--config", cfgPath, "--no-delivery")
	require.Equal(t, "export CLOUD_TASKS_EMULATOR_HOST="+addr, lines[1])

	ctx := context.Background()
	client, err := cloudtasks.NewClient(ctx, emulator.ClientOptions(addr)...)
	require.NoError(t, err)
	defer client.Close()
	q, err := client.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: "projects/p/locations/l/queues/slow"})
	require.NoError(t, err)
	require.Equal(t, 2.0, q.RateLimits.MaxDispatchesPerSecond)
	require.Equal(t, int32(5), q.RetryConfig.MaxAttempts)
	require.Equal(t, "1s", q.RetryConfig.MinBackoff.AsDuration().String())
	_, err = client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: "projects/p/locations/l/queues/q", Task: &cloudtaskspb.Task{
		Name:        "projects/p/locations/l/queues/q/tasks/t1",
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{Url: "http://127.0.0.1:1/"}},
	}})
	require.NoError(t, err)

	code, rest, _ := stop()
	require.Equal(t, 0, code)
	require.Contains(t, rest, "emulator stopped")
}

func TestEmulatorCommandDeliversAndLogs(t *testing.T) {
	t.Parallel()
	arrived := make(chan http.Header, 1)
	worker := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		arrived <- r.Header.Clone()
	}))
	defer worker.Close()
	addr, _, stop := startEmulatorCmd(t, nil, "-v", "--addr", "127.0.0.1:0", "--queue", "projects/p/locations/l/queues/q")
	ctx := context.Background()
	client, err := cloudtasks.NewClient(ctx, emulator.ClientOptions(addr)...)
	require.NoError(t, err)
	defer client.Close()
	_, err = client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: "projects/p/locations/l/queues/q", Task: &cloudtaskspb.Task{
		Name:        "projects/p/locations/l/queues/q/tasks/now",
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{Url: worker.URL}},
	}})
	require.NoError(t, err)
	h := <-arrived // due at once: the real clock's loop sends it
	require.Equal(t, "now", h.Get("X-CloudTasks-TaskName"))
	// The 200 deletes the task; each GetTask is a round trip, not a sleep.
	for {
		_, err := client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: "projects/p/locations/l/queues/q/tasks/now"})
		if status.Code(err) == codes.NotFound {
			break
		}
		require.NoError(t, err)
	}
	code, _, logs := stop()
	require.Equal(t, 0, code)
	require.Contains(t, logs, "msg=rpc method=CreateTask code=OK")
	require.Contains(t, logs, "msg=delivery task=projects/p/locations/l/queues/q/tasks/now attempt=1 status=200")
}

func TestEmulatorCommandAddressFromEnvironmentAndFaults(t *testing.T) {
	t.Parallel()
	getenv := func(k string) string {
		if k == emulatorHostEnv {
			return "127.0.0.1:0"
		}
		return ""
	}
	addr, _, stop := startEmulatorCmd(t, getenv, "--queue", "projects/p/locations/l/queues/q", "--fault", "CreateTask:UNAVAILABLE:1:commit")
	require.True(t, strings.HasPrefix(addr, "127.0.0.1:"), addr)
	ctx := context.Background()
	client, err := cloudtasks.NewClient(ctx, emulator.ClientOptions(addr)...)
	require.NoError(t, err)
	defer client.Close()
	_, err = client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: "projects/p/locations/l/queues/q", Task: &cloudtaskspb.Task{
		Name:        "projects/p/locations/l/queues/q/tasks/t1",
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{Url: "http://127.0.0.1:1/"}},
	}})
	require.Equal(t, codes.Unavailable, status.Code(err))
	_, err = client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: "projects/p/locations/l/queues/q/tasks/t1"})
	require.NoError(t, err, "committed before failing")
	code, _, _ := stop()
	require.Equal(t, 0, code)
}

func TestEmulatorCommandUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"queues": [{"name": "projects/p/locations/l/queues/q", "min_backoff": "soon"}]}`), 0o600))
	misspelt := filepath.Join(dir, "misspelt.yaml")
	require.NoError(t, os.WriteFile(misspelt, []byte("queue:\n  - name: x\n"), 0o600))
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"bad fault", []string{"--fault", "CreateTask:UNAVAILABLE"}, `want METHOD[,METHOD]:CODE:RATE[:commit][,each]`},
		{"bad fault option", []string{"--fault", "CreateTask:UNAVAILABLE:0.1:later"}, `--fault "CreateTask:UNAVAILABLE:0.1:later": option "later" is not commit or each`},
		{"each on a single RPC", []string{"--fault", "CreateTask:UNAVAILABLE:0.1:each"}, `"CreateTask" is not a batch RPC`},
		{"bad code", []string{"--fault", "CreateTask:NOPE:0.1"}, `"NOPE" is not a gRPC code name`},
		{"bad method", []string{"--fault", "Create:UNAVAILABLE:0.1"}, `is not a Cloud Tasks RPC name`},
		{"bad queue", []string{"--queue", "projects/p/queues/q"}, `Config.Queues[0].Name "projects/p/queues/q"`},
		{"bad bare queue ID", []string{"--queue", "a_b"}, `Config.Queues[0].Name "projects/p/locations/europe-west1/queues/a_b" queue ID "a_b" must be 1 to 100 characters from [A-Za-z0-9-]`},
		{"address with a scheme", []string{"--addr", "http://127.0.0.1:8123"}, `--addr "http://127.0.0.1:8123": want HOST:PORT, for example 127.0.0.1:8123`},
		{"http address without a port", []string{"--http-addr", "127.0.0.1"}, `--http-addr "127.0.0.1": want HOST:PORT`},
		{"allowed host with a scheme", []string{"--allow-host", "http://tasks.internal"}, `--allow-host "http://tasks.internal" is not a host name; allowed: a name such as tasks.internal or an IP, optionally with :PORT, without a scheme or path`},
		{"bad duration", []string{"--config", bad}, "queues[0].min_backoff: line 1: cannot unmarshal !!str `soon` into time.Duration; want a Go duration such as \"100ms\" or \"1h\""},
		{"unknown key", []string{"--config", misspelt}, `field queue not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var errBuf bytes.Buffer
			code := Run(context.Background(), append([]string{"emulator", "--addr", "127.0.0.1:0"}, tt.args...), Env{Err: &errBuf})
			require.Equal(t, 2, code, errBuf.String())
			require.Contains(t, errBuf.String(), tt.msg)
		})
	}
}

// The HTTP server answers the hosts --allow-host (or its variable) names,
// and 421 to others.
func TestEmulatorCommandAllowHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		getenv func(string) string
		args   []string
	}{
		{"flag", nil, []string{"--allow-host", "tasks.internal", "--allow-host", "other.internal:9000"}},
		{"environment", func(k string) string {
			if k == emulatorAllowHostsEnv {
				return "tasks.internal, other.internal:9000"
			}
			return ""
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, lines, stop := startEmulatorCmd(t, tt.getenv, append([]string{"--addr", "127.0.0.1:0", "--no-delivery"}, tt.args...)...)
			keys := strings.Fields(strings.TrimPrefix(lines[len(lines)-1], "OIDC keys: "))[0]
			got := map[string]int{}
			for _, host := range []string{"tasks.internal", "other.internal:9000", "other.internal:9001", "attacker.example"} {
				req, err := http.NewRequest(http.MethodGet, keys, nil)
				require.NoError(t, err)
				req.Host = host
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				resp.Body.Close()
				got[host] = resp.StatusCode
			}
			require.Equal(t, map[string]int{
				"tasks.internal": http.StatusOK, "other.internal:9000": http.StatusOK,
				"other.internal:9001": http.StatusMisdirectedRequest, "attacker.example": http.StatusMisdirectedRequest,
			}, got)
			code, _, _ := stop()
			require.Equal(t, 0, code)
		})
	}
}

func TestParseFaultFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want emulator.FaultRule
	}{
		{"CreateTask:UNAVAILABLE:0.05", emulator.FaultRule{Methods: []string{"CreateTask"}, Code: codes.Unavailable, Rate: 0.05}},
		{"CreateTask,GetTask:Internal:1:commit", emulator.FaultRule{Methods: []string{"CreateTask", "GetTask"}, Code: codes.Internal, Rate: 1, CommitThenFail: true}},
		{"BatchCreateTasks:UNAVAILABLE:0.1:each", emulator.FaultRule{Methods: []string{"BatchCreateTasks"}, Code: codes.Unavailable, Rate: 0.1, PerRequest: true}},
		{"BatchCreateTasks:DEADLINE_EXCEEDED:0.5:commit,each", emulator.FaultRule{Methods: []string{"BatchCreateTasks"}, Code: codes.DeadlineExceeded, Rate: 0.5, CommitThenFail: true, PerRequest: true}},
		{"*:ABORTED:0.2", emulator.FaultRule{Code: codes.Aborted, Rate: 0.2}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := parseFaultFlag(tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
