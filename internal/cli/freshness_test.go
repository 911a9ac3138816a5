package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/testtools/duckdbtest"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// duckDBNode returns node and the node_modules holding @duckdb/node-api,
// or skips the test (see package duckdbtest).
var duckDBNode = duckdbtest.Node

// A running dispatcher's answered outcome reaches DuckDB, through the
// docs' query, within its publish interval: a `dispatch --from -` process
// is kept running (its stdin stays open) while DuckDB polls. The default
// interval and the shortest are both checked; the seconds DuckDB took are
// logged (go test -v) for the docs.
//
// Time budget: about 32 s of wall time (the default interval, waited for
// in parallel with the 1 s case), nearly all idle: one emulator, one
// dispatcher and one node process polling every 100 ms.
func TestBinaryDuckDBSeesARunningDispatcherWithinThePublishInterval(t *testing.T) {
	t.Parallel()
	node, modules := duckDBNode(t)
	script, err := filepath.Abs(filepath.Join("testdata", "duckdb_poll.cjs"))
	require.NoError(t, err)
	const margin = 5 * time.Second // conversion, DuckDB's read, node's start
	for _, tt := range []struct {
		name     string
		flags    []string
		interval time.Duration
	}{
		{"default", nil, parquetbox.DefaultPublishInterval},
		{"1s", []string{"--publish-interval", "1s"}, time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			emu := startCLIEmulator(t)
			box := filepath.Join(t.TempDir(), "outbox")
			args := append(append([]string(nil), dispatchArgs...), "--url", "https://w/x", "--outbox", box, "--from", "-", "--json")
			cmd := exec.Command(ctdispatchBinary(t), append(args, tt.flags...)...)
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
			answers := bufio.NewReader(stdout)
			line, err := answers.ReadString('\n')
			require.NoError(t, err, stderr.String())
			var answer struct {
				Outcome string
				ID      string `json:"dispatch_id"`
			}
			require.NoError(t, json.Unmarshal([]byte(line), &answer), line)
			require.Equal(t, "created", answer.Outcome, line)

			// The docs' query for every state of one ID, answered outcomes only.
			glob := filepath.Join(box, "dispatch_outbox", "**", "*.parquet")
			sql := fmt.Sprintf(`SELECT dispatch_id, status FROM read_parquet('%s', hive_partitioning = true)
				WHERE dispatch_id = '%s' AND status IN ('created', 'already_existed') ORDER BY updated_at`, glob, answer.ID)
			deadline := tt.interval + margin
			poll := exec.Command(node, script, sql, fmt.Sprint(deadline.Seconds()))
			poll.Env = append(os.Environ(), "NODE_PATH="+modules)
			var pollErr strings.Builder
			poll.Stderr = &pollErr
			out, err := poll.Output()
			require.NoError(t, err, "DuckDB did not see the outcome within %s: %s", deadline, pollErr.String())
			var seen struct {
				Row     map[string]string
				Seconds float64
			}
			require.NoError(t, json.Unmarshal(out, &seen), string(out))
			require.Equal(t, map[string]string{"dispatch_id": answer.ID, "status": "created"}, seen.Row)
			require.LessOrEqual(t, seen.Seconds, deadline.Seconds())
			t.Logf("publish interval %s: DuckDB saw the created row %.1f s after the dispatcher answered", tt.interval, seen.Seconds)

			// The dispatcher was running all along (not a zombie): it ends
			// only now, when its input does.
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
			require.NoError(t, err)
			_, state, _ := strings.Cut(string(stat), ") ")
			require.NotEqual(t, "Z", state[:1], "the dispatcher ended before its input did: %s", stderr.String())
			require.NoError(t, stdin.Close())
			rest, err := io.ReadAll(answers)
			require.NoError(t, err)
			require.Empty(t, string(rest))
			require.NoError(t, cmd.Wait(), stderr.String())
		})
	}
}
