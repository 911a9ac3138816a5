package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/chaos"
)

// The command runs the library-only scenario in-process (the others start
// ctdispatch processes and are run by internal/chaos's own tests).
func TestChaosFaults(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"chaos", "--only", "faults", "--requests", "40", "--seed", "3", "--dir", t.TempDir()},
		Env{Out: &out, Err: &errb})
	require.Equal(t, 0, code, errb.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, out.String())
	require.True(t, strings.HasPrefix(lines[0], "chaos: seed 3, default sizes, work in "), lines[0])
	require.True(t, strings.HasPrefix(lines[1], "PASS faults: dispatched 40 requests twice each"), lines[1])
	require.Contains(t, lines[1], "exactly 50 tasks")
	require.Equal(t, "1 passed, 0 failed", lines[2])
}

func TestChaosJSON(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"chaos", "--only", "faults", "--requests", "20", "--seed", "5", "--json", "--dir", t.TempDir()},
		Env{Out: &out, Err: &errb})
	require.Equal(t, 0, code, errb.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, out.String())
	var res struct {
		Scenario string `json:"scenario"`
		Passed   bool   `json:"passed"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &res))
	require.Equal(t, "faults", res.Scenario)
	require.True(t, res.Passed)
	var sum map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &sum))
	require.Equal(t, "1 passed, 0 failed", sum["summary"])
	require.Equal(t, float64(5), sum["seed"])
}

// A child that is not ctdispatch breaks every CLI check: FAIL, exit 1.
func TestChaosFailureExitsOne(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"chaos", "--only", "bad-input", "--requests", "20", "--seed", "1",
		"--binary", "/bin/true", "--dir", t.TempDir()}, Env{Out: &out, Err: &errb})
	require.Equal(t, 1, code, out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.True(t, strings.HasPrefix(lines[1], "FAIL bad-input: "), lines[1])
	require.Contains(t, lines[1], "CLI: exit status 0 with bad lines, want 1")
	require.Equal(t, "0 passed, 1 failed", lines[len(lines)-1])
	// The error is the one line on stderr: the outbox's warnings about the
	// files the scenario damaged appear only with -v.
	require.Equal(t, "ctdispatch: chaos: 0 passed, 1 failed (seed 1)\n", errb.String())
}

func TestChaosUsage(t *testing.T) {
	t.Parallel()
	var errb bytes.Buffer
	code := Run(context.Background(), []string{"chaos", "--only", "nope"}, Env{Err: &errb})
	require.Equal(t, 2, code)
	require.Equal(t, "ctdispatch: chaos: Options.Only \"nope\" is not a scenario; allowed: herd, crash, faults, bad-input, recover-herd, disk-full, busy-day, e2e\n", errb.String())
}

// The e2e scenario's child command runs only as the scenario starts it:
// without its configuration it says where that comes from, and a role it
// does not know is named.
func TestChaosE2EChild(t *testing.T) {
	t.Parallel()
	var errb bytes.Buffer
	code := Run(context.Background(), []string{"chaos", "e2e-child"}, Env{Err: &errb, Getenv: func(string) string { return "" }})
	require.Equal(t, 2, code)
	require.Equal(t, "ctdispatch: $CTDISPATCH_E2E_CHILD is not set: this command is started by `ctdispatch chaos --only e2e`\n", errb.String())

	errb.Reset()
	env := Env{Err: &errb, Getenv: func(k string) string {
		if k == chaos.E2EChildEnv {
			return `{"role":"juggler"}`
		}
		return ""
	}}
	code = Run(context.Background(), []string{"chaos", "e2e-child"}, env)
	require.Equal(t, 1, code)
	require.Equal(t, "ctdispatch: chaos: CTDISPATCH_E2E_CHILD: role \"juggler\" is not one of orchestrator, recover, worker\n", errb.String())
}
