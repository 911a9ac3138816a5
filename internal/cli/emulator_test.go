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
		{"delivery fault without a rate", []string{"--delivery-fault", "lose_reply"}, `--delivery-fault "lose_reply": want KIND:RATE, for example lose_reply:0.05`},
		{"unknown delivery fault", []string{"--delivery-fault", "lose:0.1"}, `--delivery-fault "lose:0.1": "lose" is not a delivery fault; allowed: deliver_twice, lose_reply, reset, delay, withhold, drop`},
		{"delivery fault rate above 1", []string{"--delivery-fault", "reset:2"}, `--delivery-fault "reset:2": rate "2" is not a number from 0 to 1`},
		{"delivery fault rate not a number", []string{"--delivery-fault", "reset:often"}, `--delivery-fault "reset:often": rate "often" is not a number from 0 to 1`},
		{"a kind given twice", []string{"--delivery-fault", "reset:0.1", "--delivery-fault", "reset:0.2"}, `--delivery-fault "reset:0.2": reset has a rate already; give each kind once`},
		{"rates above 1 in all", []string{"--delivery-fault", "reset:0.6", "--delivery-fault", "drop:0.5"}, `--delivery-fault: the rates add up to 1.1, more than 1; an attempt meets one fault at most`},
		{"task fault without a task", []string{"--task-fault", "lose_reply"}, `--task-fault "lose_reply": want KIND:TASK, for example lose_reply:dispatch:run1:extract:1`},
		{"task fault with an empty task", []string{"--task-fault", "lose_reply:"}, `--task-fault "lose_reply:": want KIND:TASK`},
		{"unknown task fault", []string{"--task-fault", "twice:d_abc"}, `--task-fault "twice:d_abc": "twice" is not a delivery fault`},
		{"a task given twice", []string{"--task-fault", "reset:d_abc", "--task-fault", "drop:d_abc"}, `--task-fault "drop:d_abc": task "d_abc" has the fault reset already; a task meets one planted fault`},
		{"negative delivery delay", []string{"--delivery-delay", "-1s"}, `Config.DeliveryFaults.Delay "-1s" must not be negative`},
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

// The delivery fault flags, as the command reads them; the task of
// --task-fault may hold colons, as an Idempotency-Key does.
func TestParseDeliveryFaultFlags(t *testing.T) {
	t.Parallel()
	rates := []struct {
		in   string
		kind emulator.DeliveryFault
		rate float64
	}{
		{"deliver_twice:0.05", emulator.FaultDeliverTwice, 0.05},
		{"lose_reply:1", emulator.FaultLoseReply, 1},
		{"reset:0", emulator.FaultReset, 0},
		{"delay:.5", emulator.FaultDelay, 0.5},
		{"withhold:0.01", emulator.FaultWithhold, 0.01},
		{"drop:0.001", emulator.FaultDrop, 0.001},
	}
	for _, tt := range rates {
		kind, rate, err := parseDeliveryFaultFlag(tt.in)
		require.NoError(t, err, tt.in)
		require.Equal(t, []any{tt.kind, tt.rate}, []any{kind, rate}, tt.in)
	}
	tasks := []struct {
		in, task string
		kind     emulator.DeliveryFault
	}{
		{"lose_reply:d_cxtoltqhbncw6nevn7hy53kqn6", "d_cxtoltqhbncw6nevn7hy53kqn6", emulator.FaultLoseReply},
		{"withhold:dispatch:run1:extract:1", "dispatch:run1:extract:1", emulator.FaultWithhold},
		{"deliver_twice:projects/p/locations/l/queues/q/tasks/t1", "projects/p/locations/l/queues/q/tasks/t1", emulator.FaultDeliverTwice},
	}
	for _, tt := range tasks {
		kind, task, err := parseTaskFaultFlag(tt.in)
		require.NoError(t, err, tt.in)
		require.Equal(t, []any{tt.kind, tt.task}, []any{kind, task}, tt.in)
	}

	// The flags add to what a config file planned.
	plan := emulator.DeliveryFaults{Rates: map[emulator.DeliveryFault]float64{emulator.FaultDelay: 0.1}}
	require.NoError(t, addDeliveryFaults(&plan, []string{"lose_reply:0.2"}, []string{"reset:t1", "drop:dispatch:r:k:1"}))
	require.Equal(t, emulator.DeliveryFaults{
		Rates: map[emulator.DeliveryFault]float64{emulator.FaultDelay: 0.1, emulator.FaultLoseReply: 0.2},
		Tasks: map[string]emulator.DeliveryFault{"t1": emulator.FaultReset, "dispatch:r:k:1": emulator.FaultDrop},
	}, plan)
	var out bytes.Buffer
	plan.Seed = 4
	printDeliveryFaults(&out, plan)
	require.Equal(t, "delivery fault lose_reply at rate 0.2 (seed 4)\ndelivery fault delay at rate 0.1 (seed 4)\n"+
		"delivery fault drop on task dispatch:r:k:1\ndelivery fault reset on task t1\n", out.String())
}
