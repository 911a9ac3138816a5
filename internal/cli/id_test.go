package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIDCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{
			name:       "dispatch ID",
			args:       []string{"id", "dispatch:run1:extract:1"},
			wantStdout: "d_cxtoltqhbncw6nevn7hy53kqn6\n",
		},
		{
			name:       "retry timer ID",
			args:       []string{"id", "timer:retry:run1:extract:1:1705340400"},
			wantStdout: "t_hlljqq57362d4n3x2kett7jrqf\n",
		},
		{
			name:       "dispatch from parts",
			args:       []string{"id", "dispatch", "--run", "run1", "--task", "extract", "--attempt", "1"},
			wantStdout: "dispatch:run1:extract:1\td_cxtoltqhbncw6nevn7hy53kqn6\n",
		},
		{
			name:       "retry from parts with an RFC 3339 due time",
			args:       []string{"id", "retry", "--run", "run1", "--task", "extract", "--attempt", "1", "--due", "2024-01-15T17:40:00Z"},
			wantStdout: "timer:retry:run1:extract:1:1705340400\tt_hlljqq57362d4n3x2kett7jrqf\n",
		},
		{
			name:       "retry from parts with an epoch due time",
			args:       []string{"id", "retry", "--run", "run1", "--task", "extract", "--attempt", "1", "--due", "1705340400"},
			wantStdout: "timer:retry:run1:extract:1:1705340400\tt_hlljqq57362d4n3x2kett7jrqf\n",
		},
		{
			name:       "caller key fills the attempt slot",
			args:       []string{"id", "dispatch", "--run", "run1", "--task", "extract", "--key", "evt-42"},
			wantStdout: "dispatch:run1:extract:k-kdfo6u43zxiplof3rajyylplvs\td_" + mustCloudID(t, "dispatch:run1:extract:k-kdfo6u43zxiplof3rajyylplvs") + "\n",
		},
		{
			name:       "invalid component",
			args:       []string{"id", "dispatch:r a:t:1"},
			wantCode:   1,
			wantStderr: "ctdispatch: invalid internal ID \"dispatch:r a:t:1\": run_id \"r a\" contains whitespace (' '); allowed: [A-Za-z0-9._-]\n",
		},
		{
			name:       "non-canonical attempt",
			args:       []string{"id", "dispatch:r:t:01"},
			wantCode:   1,
			wantStderr: "ctdispatch: invalid internal ID \"dispatch:r:t:01\": attempt \"01\" has a leading zero; attempt numbers are written in canonical decimal (\"1\", not \"01\")\n",
		},
		{
			name:       "no argument",
			args:       []string{"id"},
			wantCode:   2,
			wantStderr: "ctdispatch: id takes one internal ID (or a subcommand: dispatch, retry, heartbeat); got 0 arguments\n",
		},
		{
			name:       "two identity strategies",
			args:       []string{"id", "dispatch", "--run", "r", "--task", "t", "--attempt", "1", "--unique"},
			wantCode:   2,
			wantStderr: "ctdispatch: give exactly one of --attempt N, --key KEY or --unique\n",
		},
		{
			name:       "bad due time",
			args:       []string{"id", "retry", "--run", "r", "--task", "t", "--attempt", "1", "--due", "tomorrow"},
			wantCode:   2,
			wantStderr: "ctdispatch: --due \"tomorrow\" is not a time; use RFC 3339 (2024-01-15T17:40:00Z) or seconds since the epoch\n",
		},
		{
			name:       "missing check time",
			args:       []string{"id", "heartbeat", "--run", "r", "--task", "t"},
			wantCode:   2,
			wantStderr: "ctdispatch: --check is required (RFC 3339 or seconds since the epoch)\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, nil, tt.args...)
			require.Equal(t, tt.wantCode, res.code, "stderr: %s", res.stderr)
			require.Equal(t, tt.wantStdout, res.stdout)
			require.Equal(t, tt.wantStderr, res.stderr)
		})
	}
}

// mustCloudID runs the CLI on an internal ID and returns the hash part of
// the task ID, so the caller-key case checks the two paths agree.
func mustCloudID(t *testing.T, internalID string) string {
	t.Helper()
	res := run(t, nil, "id", internalID)
	require.Equal(t, 0, res.code, res.stderr)
	return strings.TrimPrefix(strings.TrimSpace(res.stdout), "d_")
}

func TestIDCommandJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, golden string
		args         []string
	}{
		{"dispatch", "id_dispatch.json", []string{"id", "--json", "dispatch:run1:extract:1"}},
		{"retry", "id_retry.json", []string{"id", "--json", "timer:retry:run1:extract:1:1705340400"}},
		{"heartbeat from parts", "id_heartbeat.json", []string{"id", "heartbeat", "--json", "--run", "run1", "--task", "extract", "--check", "1705340460"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, nil, tt.args...)
			require.Equal(t, 0, res.code, res.stderr)
			require.Empty(t, res.stderr)
			var obj map[string]any
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &obj), "one JSON object")
			golden(t, tt.golden, res.stdout)
		})
	}
}

func TestIDUniqueIsFreshEachTime(t *testing.T) {
	t.Parallel()
	a := run(t, nil, "id", "dispatch", "--run", "r", "--task", "t", "--unique")
	b := run(t, nil, "id", "dispatch", "--run", "r", "--task", "t", "--unique")
	require.Equal(t, 0, a.code, a.stderr)
	require.Regexp(t, `^dispatch:r:t:u-[0-9a-f-]{36}\td_[a-z2-7]{26}\n$`, a.stdout)
	require.NotEqual(t, a.stdout, b.stdout)
}

func TestIDHelp(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "id", "--help")
	require.Equal(t, 0, res.code)
	for _, want := range []string{"dispatch:{run_id}:{task_key}:{attempt}", "timer:heartbeat:", "[A-Za-z0-9._-]", "ctdispatch id --json"} {
		require.Contains(t, res.stdout, want)
	}
}
