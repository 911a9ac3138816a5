package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"

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
