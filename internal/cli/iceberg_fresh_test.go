//go:build iceberg

package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// A running dispatcher's answered outcome is readable through the Iceberg
// table within a minute with everything at its defaults: the dispatcher
// publishes its log every 30 s, and compact --every (alone: every 15 s)
// publishes the table. iceberg-go's scan polls the table every 250 ms;
// the seconds it took are logged (go test -v) for docs/outbox.md.
//
// Time budget: about 50 s of wall time, nearly all idle: one emulator,
// one dispatcher, one compactor and the scan.
func TestBinaryIcebergSeesARunningDispatcherWithinAMinute(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	box := filepath.Join(t.TempDir(), "outbox")
	require.NoError(t, os.Mkdir(box, 0o700))
	res := runBinary(t, nil, "", "compact", "--outbox", box, "--iceberg")
	require.Equal(t, 0, res.code, res.stderr)
	compactor := startWatched(t, "compact --every", nil, "compact", "--outbox", box, "--every")

	args := append(append([]string(nil), dispatchArgs...), "--url", "https://w/x", "--outbox", box, "--from", "-", "--json")
	cmd := exec.Command(ctdispatchBinary(t), args...)
	cmd.Env = append(os.Environ(), emulatorEnv+"="+emu.Addr())
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})
	_, err = io.WriteString(stdin, `{"run":"fresh","task":"a","attempt":1}`+"\n")
	require.NoError(t, err)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, stderr.String())
	answered := time.Now()
	var answer struct {
		Outcome string
		ID      string `json:"dispatch_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &answer), line)
	require.Equal(t, "created", answer.Outcome, line)

	const promise = time.Minute
	cat := fileCatalog(t, box)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var seen time.Duration
	for range tick.C {
		s, err := scanTable(context.Background(), cat, outbox.TableDispatch)
		if err == nil && s.created[answer.ID] > 0 {
			seen = time.Since(answered)
			break
		}
		require.False(t, err != nil && err != errNoTable, "scan: %v", err)
		require.Less(t, time.Since(answered), promise+10*time.Second, "not in the Iceberg table: compactor said %s", compactor.stderrText())
	}
	require.LessOrEqual(t, seen, promise)
	t.Logf("the created row was in the Iceberg table %.1f s after the dispatcher answered", seen.Seconds())

	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait(), stderr.String())
	require.Equal(t, 0, compactor.term(t), compactor.stderrText())
}
