package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDemoCommand(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "demo", "--runs", "2")
	require.Equal(t, 0, res.code, res.stderr)
	require.Empty(t, res.stderr)
	for _, want := range []string{
		"ctdispatch demo: 2 runs × 4 tasks on the in-repo emulator, every call made twice\n",
		"dispatches  16 calls → ",
		"timers      8 calls → ",
		"queue       12 tasks after dispatching (one per distinct ID), 0 left at the end\n",
		"worker      14 deliveries of 14 attempts, 12 distinct keys done once each, 2 repeats acknowledged without redoing work, 0 rejected\n",
		"            (cloudtasks/worker with its in-memory inbox, one process only; a service uses worker.NewSQLInbox. Tokens unchecked: the demo's tasks carry none)\n",
		"outbox      removed at exit; run go run ./cmd/ctdispatch demo --keep to explore it\n",
	} {
		require.Contains(t, res.stdout, want)
	}
	require.NotContains(t, res.stdout, "query --outbox", "no command names a directory that is gone")
}

func TestDemoCommandJSON(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "demo", "--runs", "1", "--json", "--commit-then-fail", "-1")
	require.Equal(t, 0, res.code, res.stderr)
	var sum map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &sum))
	require.ElementsMatch(t, []string{"runs", "tasks", "dispatch_calls", "dispatch", "timer_calls", "timers",
		"tasks_in_queue_after_dispatch", "advanced_seconds", "delivery_attempts", "worker", "tasks_left",
		"outbox_dir", "kept"}, keysOf(sum))
	require.Equal(t, 8.0, sum["dispatch_calls"])
	require.Equal(t, map[string]any{"created": 4.0, "already_existed": 4.0, "skipped": 4.0, "recovered": 0.0, "create_calls": 4.0},
		sum["dispatch"], "without faults every first call creates")
	require.Equal(t, 360.0, sum["advanced_seconds"], "the clock moves 6m to fire the timers")
	require.Equal(t, 0.0, sum["tasks_left"])
	require.ElementsMatch(t, []string{"deliveries", "unique", "repeats", "rejected"}, keysOf(sum["worker"].(map[string]any)))
}

// keysOf returns the keys of a decoded JSON object.
func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestDemoCommandRejectsBadFlags(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "demo", "--runs", "-2")
	require.Equal(t, 2, res.code)
	require.Empty(t, res.stdout)
	require.Equal(t, "ctdispatch: demo: runs -2 out of range; allowed: 1 to 1000\n", res.stderr)
}
