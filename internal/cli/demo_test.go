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
		"(removed at exit; run with --keep to explore it)\n",
		"/dispatch_outbox/**/*.parquet', hive_partitioning = true)",
	} {
		require.Contains(t, res.stdout, want)
	}
}

func TestDemoCommandJSON(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "demo", "--runs", "1", "--json", "--commit-then-fail", "-1")
	require.Equal(t, 0, res.code, res.stderr)
	var sum struct {
		DispatchCalls int
		Dispatch      struct{ Created, AlreadyExisted, Skipped, CreateCalls int }
		TasksLeft     int
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &sum))
	require.Equal(t, 8, sum.DispatchCalls)
	require.Equal(t, 4, sum.Dispatch.Created, "without faults every first call creates")
	require.Equal(t, 4, sum.Dispatch.Skipped)
	require.Equal(t, 4, sum.Dispatch.CreateCalls)
	require.Equal(t, 0, sum.TasksLeft)
}

func TestDemoCommandRejectsBadFlags(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "demo", "--runs", "-2")
	require.Equal(t, 1, res.code)
	require.Empty(t, res.stdout)
	require.Equal(t, "ctdispatch: demo: runs -2 out of range; allowed: 1 to 1000\n", res.stderr)
}
