package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
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

// stats names the live processes and their default queues when these
// differ (two dispatchers of a rolling redeploy that changed
// Config.Queue), in a table's last line and as a JSON line; with one
// default queue among them it says nothing of them.
func TestStatsWarnsOfDifferentDefaultQueues(t *testing.T) {
	t.Parallel()
	const (
		procA  = "00000000-0000-4000-8000-0000000000a1"
		procB  = "00000000-0000-4000-8000-0000000000b2"
		queueA = "projects/p/locations/l/queues/orders"
		queueB = "projects/p/locations/l/queues/orders-v2"
	)
	for _, tc := range []struct {
		name           string
		second         string
		warning, jline string
	}{
		{"different", queueB,
			"warning: live processes on this outbox have different default queues; a new ID two of them dispatch at once without naming a queue can become a task in each (docs/consistency.md): " +
				procA + " " + queueA + ", " + procB + " " + queueB,
			`{"default_queues_differ":[{"processor_uuid":"` + procA + `","default_queue":"` + queueA + `"},{"processor_uuid":"` + procB + `","default_queue":"` + queueB + `"}]}`},
		{"the same", queueA, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ctx := context.Background()
			for _, p := range []outbox.Process{{ProcessorUUID: procA, DefaultQueue: queueA}, {ProcessorUUID: procB, DefaultQueue: tc.second}} {
				o, err := parquetbox.Open(ctx, parquetbox.Config{Root: dir, ProcessorUUID: uuid.MustParse(p.ProcessorUUID)})
				require.NoError(t, err)
				t.Cleanup(func() { o.Close() })
				require.NoError(t, o.Announce(ctx, p))
			}

			code, stdout, stderr := runCLI(t, "stats", "--outbox", dir)
			require.Equal(t, 0, code, stderr)
			lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
			last := lines[len(lines)-1]
			if tc.warning == "" {
				require.NotContains(t, stdout, "default queue")
			} else {
				require.Equal(t, tc.warning, last)
				require.Equal(t, "", lines[len(lines)-2])
			}

			code, stdout, stderr = runCLI(t, "stats", "--outbox", dir, "--format", "json")
			require.Equal(t, 0, code, stderr)
			lines = strings.Split(strings.TrimRight(stdout, "\n"), "\n")
			if tc.jline == "" {
				require.NotContains(t, stdout, "default_queues_differ")
			} else {
				require.Equal(t, tc.jline, lines[len(lines)-1])
			}
		})
	}
}
