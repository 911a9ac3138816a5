package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

var (
	emulatorBinOnce sync.Once
	emulatorBinPath string
	emulatorBinErr  error
)

// emulatorBinary builds cmd/ctdispatch once per test process, so the
// emulator command is tested as a user runs it.
func emulatorBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	emulatorBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ctdispatch-emulator-bin-")
		if err != nil {
			emulatorBinErr = err
			return
		}
		emulatorBinPath = filepath.Join(dir, "ctdispatch")
		out, err := exec.Command("go", "build", "-o", emulatorBinPath, "github.com/ctdispatch/ctdispatch/cmd/ctdispatch").CombinedOutput()
		if err != nil {
			emulatorBinErr = errors.New(string(out))
		}
	})
	require.NoError(t, emulatorBinErr)
	return emulatorBinPath
}

func TestEmulatorBinaryWarnsOnAllInterfacesAndTakesBareQueueIDs(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(emulatorBinary(t), "emulator", "--addr", ":0", "--queue", "work", "--queue", "projects/other/locations/l/queues/full", "--no-delivery")
	cmd.Env = append(os.Environ(), emulatorHostEnv+"=")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) == 5 {
			break
		}
	}
	require.Len(t, lines, 5)
	listen := strings.TrimPrefix(lines[0], "Cloud Tasks emulator listening on ")
	_, port, err := net.SplitHostPort(listen)
	require.NoError(t, err)
	warn, err := bufio.NewReader(stderr).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ctdispatch: warning: --addr :0 listens on every network interface ("+listen+") without authentication; use 127.0.0.1:PORT to keep the emulator on this machine\n", warn)
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

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	rest, err := io.ReadAll(stdout)
	require.NoError(t, err)
	moreErr, err := io.ReadAll(stderr)
	require.NoError(t, err)
	require.NoError(t, cmd.Wait())
	require.Equal(t, "emulator stopped\n", string(rest))
	require.Empty(t, string(moreErr), "one warning line, nothing else")
}

func TestEmulatorBinaryOnLoopbackDoesNotWarn(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(emulatorBinary(t), "emulator", "--addr", "127.0.0.1:0", "--no-delivery")
	cmd.Env = append(os.Environ(), emulatorHostEnv+"=")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	require.True(t, sc.Scan())
	require.True(t, strings.HasPrefix(sc.Text(), "Cloud Tasks emulator listening on 127.0.0.1:"), sc.Text())
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	_, _ = io.ReadAll(stdout)
	errOut, err := io.ReadAll(stderr)
	require.NoError(t, err)
	require.NoError(t, cmd.Wait())
	require.Empty(t, string(errOut))
}
