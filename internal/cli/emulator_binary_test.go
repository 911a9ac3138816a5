package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// emulatorProcess is `ctdispatch emulator` running as a child process.
type emulatorProcess struct {
	cmd            *exec.Cmd
	stdout, stderr io.ReadCloser
}

// startEmulatorBinary starts the built binary's emulator command with args
// and an empty CLOUD_TASKS_EMULATOR_HOST; the test's cleanup kills it.
func startEmulatorBinary(t *testing.T, args ...string) *emulatorProcess {
	t.Helper()
	cmd := exec.Command(ctdispatchBinary(t), append([]string{"emulator"}, args...)...)
	cmd.Env = append(os.Environ(), emulatorHostEnv+"=")
	p := &emulatorProcess{cmd: cmd}
	var err error
	p.stdout, err = cmd.StdoutPipe()
	require.NoError(t, err)
	p.stderr, err = cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return p
}

// interrupt sends SIGINT, as Ctrl-C does, and returns the rest of stdout
// and stderr once the process has exited successfully.
func (p *emulatorProcess) interrupt(t *testing.T) (stdout, stderr string) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	out, err := io.ReadAll(p.stdout)
	require.NoError(t, err)
	errOut, err := io.ReadAll(p.stderr)
	require.NoError(t, err)
	require.NoError(t, p.cmd.Wait())
	return string(out), string(errOut)
}

func TestEmulatorBinaryWarnsOnAllInterfacesAndTakesBareQueueIDs(t *testing.T) {
	t.Parallel()
	p := startEmulatorBinary(t, "--addr", ":0", "--queue", "work", "--queue", "projects/other/locations/l/queues/full", "--no-delivery")
	var lines []string
	sc := bufio.NewScanner(p.stdout)
	for len(lines) < 5 && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.Len(t, lines, 5)
	listen := strings.TrimPrefix(lines[0], "Cloud Tasks emulator listening on ")
	_, port, err := net.SplitHostPort(listen)
	require.NoError(t, err)
	warn, err := bufio.NewReader(p.stderr).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ctdispatch: warning: --addr :0 listens on every network interface ("+listen+") without authentication; use 127.0.0.1:PORT to keep the emulator on this machine (in a container, publish the port on 127.0.0.1)\n", warn)
	require.Equal(t, "export CLOUD_TASKS_EMULATOR_HOST=127.0.0.1:"+port, lines[1], "a local client dials loopback")
	require.Equal(t, []string{
		"queue projects/other/locations/l/queues/full",
		"queue projects/p/locations/europe-west1/queues/work",
	}, lines[3:5])

	ctx := context.Background()
	client, err := cloudtasks.NewClient(ctx, emulator.ClientOptions("127.0.0.1:"+port)...)
	require.NoError(t, err)
	defer client.Close()
	q, err := client.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{Name: "projects/p/locations/europe-west1/queues/work"})
	require.NoError(t, err)
	require.Equal(t, cloudtaskspb.Queue_RUNNING, q.State)

	rest, moreErr := p.interrupt(t)
	require.Equal(t, "emulator stopped\n", rest)
	require.Empty(t, moreErr, "one warning line, nothing else")
}

func TestEmulatorBinaryOnLoopbackDoesNotWarn(t *testing.T) {
	t.Parallel()
	p := startEmulatorBinary(t, "--addr", "127.0.0.1:0", "--no-delivery")
	sc := bufio.NewScanner(p.stdout)
	require.True(t, sc.Scan())
	require.True(t, strings.HasPrefix(sc.Text(), "Cloud Tasks emulator listening on 127.0.0.1:"), sc.Text())
	_, errOut := p.interrupt(t)
	require.Empty(t, errOut)
}

// The built command with delivery faults: the worker's 2xx to the task
// planted with lose_reply (named by its Idempotency-Key) is lost, so the
// emulator delivers it again with the reason; every attempt is delayed
// (rate 1, by up to 1 ms). The command says which faults it injects, and
// -v logs each one.
func TestEmulatorBinaryInjectsDeliveryFaults(t *testing.T) {
	t.Parallel()
	const key = "dispatch:run1:extract:1"
	var mu sync.Mutex
	var got []string // retry count and reason of each request
	worker := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Header.Get("X-CloudTasks-TaskRetryCount")+" "+r.Header.Get("X-CloudTasks-TaskRetryReason"))
	}))
	defer worker.Close()
	p := startEmulatorBinary(t, "-v", "--addr", "127.0.0.1:0", "--queue", "work",
		"--task-fault", "lose_reply:"+key, "--delivery-fault", "delay:1", "--delivery-delay", "1ms")
	var lines []string
	sc := bufio.NewScanner(p.stdout)
	for len(lines) < 6 && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.Len(t, lines, 6)
	require.Equal(t, []string{
		"queue projects/p/locations/europe-west1/queues/work",
		"delivery fault delay at rate 1 (seed 0)",
		"delivery fault lose_reply on task " + key,
	}, lines[3:])
	addr := strings.TrimPrefix(lines[0], "Cloud Tasks emulator listening on ")

	ctx := context.Background()
	client, err := cloudtasks.NewClient(ctx, emulator.ClientOptions(addr)...)
	require.NoError(t, err)
	defer client.Close()
	const name = "projects/p/locations/europe-west1/queues/work/tasks/t1"
	_, err = client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: "projects/p/locations/europe-west1/queues/work", Task: &cloudtaskspb.Task{
		Name: name,
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url: worker.URL, Body: []byte(`{}`), Headers: map[string]string{"Idempotency-Key": key}}},
	}})
	require.NoError(t, err)
	// The second 200 deletes the task; each GetTask is a round trip, not a sleep.
	for {
		_, err := client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: name})
		if status.Code(err) == codes.NotFound {
			break
		}
		require.NoError(t, err)
	}
	mu.Lock()
	require.Equal(t, []string{"0 ", "1 NO_RESPONSE"}, got)
	mu.Unlock()

	_, logs := p.interrupt(t)
	require.Contains(t, logs, "fault=lose_reply task="+name+" attempt=1 status=200")
	require.Contains(t, logs, "fault=delay task="+name+" attempt=2")
}
