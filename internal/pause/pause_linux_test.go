package pause

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestChildStopsAtArmedPoint re-runs this test binary with the point armed
// through the environment: it stops, says so, and ends once continued.
func TestChildStopsAtArmedPoint(t *testing.T) {
	if os.Getenv("PAUSE_TEST_CHILD") == "1" {
		armed := Armed(CompactCommit)
		Point(CompactCommit)
		Point(CompactCommit) // once only
		os.Stdout.WriteString("went on; armed before: " + strconv.FormatBool(armed) + ", after: " + strconv.FormatBool(Armed(CompactCommit)) + "\n")
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestChildStopsAtArmedPoint$")
	cmd.Env = append(os.Environ(), "PAUSE_TEST_CHILD=1", EnvVar+"="+CompactCommit)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	var out strings.Builder
	cmd.Stdout = &out
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stderr).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "pause: stopped at compact.commit (pid "+strconv.Itoa(cmd.Process.Pid)+"); resume with SIGCONT\n", line)
	require.Eventually(t, func() bool { return Stopped(cmd.Process.Pid) }, 10*time.Second, 5*time.Millisecond, "the child never stopped")
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	require.NoError(t, cmd.Wait())
	require.Contains(t, out.String(), "went on; armed before: true, after: false\n")
}
