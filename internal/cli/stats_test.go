package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStatsCommand(t *testing.T) {
	t.Parallel()
	dir := seedOutbox(t)
	code, stdout, stderr := runCLI(t, "stats", "--outbox", dir)
	require.Equal(t, "", stderr)
	require.Equal(t, 0, code)
	lines := strings.Split(stdout, "\n")
	require.Regexp(t, `^TABLE\s+IDS\s+FILES\s+BYTES\s+ROWS\s+LOG RECORDS$`, lines[0])
	require.Regexp(t, `^dispatch_outbox\s+2\s+2\s+\d+\s+3\s+0$`, lines[1]) // the two IDs' tasks hash to two buckets
	require.Regexp(t, `^timers\s+1\s+1\s+\d+\s+1\s+0$`, lines[2])
	require.Equal(t, []string{
		"",
		"dispatch_outbox BY status  IDS",
		"  created                  1",
		"  failed                   1",
		"",
		"dispatch_outbox BY queue                IDS",
		"  " + cliQueue + "  2",
	}, trimRight(lines[3:10]))

	code, stdout, _ = runCLI(t, "stats", "--outbox", dir, "--format", "json")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, `"table":"timers","files":1,`)
	require.Contains(t, stdout, `"ids":1,"by_status":{"created":1},"by_queue":{"`+cliQueue+`":1},"by_kind":{"retry":1},"by_processor":{"`+cliProc+`":1}}`)
}

func trimRight(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimRight(l, " ")
	}
	return out
}

func TestStatsReportsSkippedFiles(t *testing.T) {
	t.Parallel()
	dir := seedOutbox(t)
	bad := filepath.Join(dir, "timers", "created_date=2026-03-01", "broken.parquet")
	require.NoError(t, os.WriteFile(bad, []byte("PAR1 not really"), 0o600))
	code, stdout, stderr := runCLI(t, "stats", "--outbox", dir, "--format", "json")
	require.Equal(t, 3, code)
	require.Equal(t, "ctdispatch: the answer may be incomplete: 1 file skipped (damaged or foreign): "+bad+" (not a readable Parquet file)\n", stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 3, "one line per table, then one per skipped file")
	var skipped map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &skipped))
	require.Equal(t, bad, skipped["skipped_file"])

	code, stdout, _ = runCLI(t, "stats", "--outbox", dir)
	require.Equal(t, 3, code)
	require.True(t, strings.HasPrefix(stdout, "TABLE"), stdout)
}
