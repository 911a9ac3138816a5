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

	"github.com/ctdispatch/ctdispatch/internal/gcsjson"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// A PostgreSQL outbox exported with "export --once" is a Parquet outbox
// the file commands read: query answers the same history and stats the
// same counts, compact folds it; a second export finds nothing new, and
// the database's stats say nothing is left to export.
// About 3 s on an idle machine.
func TestExportCommandWritesATreeTheFileCommandsRead(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	pg := postgresURL(t, "")
	tree := filepath.Join(t.TempDir(), "exported")
	code, _, stderr := runCLI(t, "migrate", "--outbox", pg)
	require.Equal(t, 0, code, stderr)
	args := append(append([]string(nil), dispatchArgs...), "--outbox", pg, "--run", "run1", "--url", "https://worker.example/x")
	for _, task := range []string{"extract", "load"} {
		code, _, stderr := runWithEnv(t, emu.Addr(), "", append(args, "--task", task, "--attempt", "1")...)
		require.Equal(t, 0, code, stderr)
	}

	unexported := func() string { // the last paragraph of stats
		code, stdout, stderr := runCLI(t, "stats", "--outbox", pg)
		require.Equal(t, 0, code, stderr)
		return stdout[strings.LastIndex(stdout, "\n\n")+2:]
	}
	code, stdout, stderr := runCLI(t, "stats", "--outbox", pg, "--format", "json")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, "unexported", "no exporter has run")
	require.NotContains(t, unexported(), "not yet exported")

	code, stdout, stderr = runCLI(t, "export", "--outbox", pg, "--to", tree, "--once")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "exported batch 1: dispatch_outbox 4 rows, timers 0 rows, deliveries 0 rows\n", stdout)
	require.Equal(t, "dispatch_outbox: 0 rows not yet exported to Parquet\ntimers: 0 rows not yet exported to Parquet\n", unexported())
	code, stdout, stderr = runCLI(t, "export", "--outbox", pg, "--to", tree, "--once")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "nothing to export\n", stdout)

	history := func(where string) string {
		code, stdout, stderr := runCLI(t, "query", "--outbox", where, "--run", "run1", "--history", "--format", "csv")
		require.Equal(t, 0, code, stderr)
		return stdout
	}
	fromPG := history(pg)
	require.Len(t, strings.Split(strings.TrimSpace(fromPG), "\n"), 5, fromPG)
	require.Equal(t, fromPG, history(tree))

	statsOf := func(where string) map[string]int64 {
		code, stdout, stderr := runCLI(t, "stats", "--outbox", where, "--format", "json")
		require.Equal(t, 0, code, stderr)
		var st struct {
			Table    string
			IDs      int64
			ByStatus map[string]int64 `json:"by_status"`
		}
		require.NoError(t, json.Unmarshal([]byte(strings.Split(stdout, "\n")[0]), &st), stdout)
		require.Equal(t, "dispatch_outbox", st.Table)
		require.Equal(t, int64(2), st.IDs)
		return st.ByStatus
	}
	require.Equal(t, statsOf(pg), statsOf(tree))

	code, stdout, stderr = runCLI(t, "compact", "--outbox", tree, "--full")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^dispatch_outbox: 2 files, 4 rows, \d+ bytes -> 2 files, 2 rows, \d+ bytes; 0 dropped by retention$`, stdout)
	code, stdout, stderr = runCLI(t, "query", "--outbox", tree, "--run", "run1", "--format", "csv")
	require.Equal(t, 0, code, stderr)
	require.Len(t, strings.Split(strings.TrimSpace(stdout), "\n"), 3, "the latest state of each ID: %s", stdout)
}

// Wrong uses of export and --export-to are usage errors that say what is
// allowed.
func TestExportUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"export", "--outbox", dir, "--to", dir}, "is not a PostgreSQL URL"},
		{[]string{"export", "--outbox", "postgres://h/db"}, "--to is required"},
		{[]string{"export", "--outbox", "postgres://h/db", "--to", "postgres://h/db"}, "--to postgres://h/db is a PostgreSQL URL"},
		{[]string{"export", "--outbox", "postgres://h/db", "--to", "ftp://x"}, `--to "ftp://x": scheme "ftp" unknown`},
		{[]string{"export", "--outbox", "postgres://h/db", "--to", dir, "--interval", "10ms"}, "--interval 10ms is below the minimum 1s"},
		{dispatchWith("--outbox", dir, "--export-to", dir), "--export-to applies to a PostgreSQL --outbox"},
		{dispatchWith("--outbox", "postgres://h/db", "--export-to", dir, "--export-interval", "1ms"), "--export-interval 1ms is below the minimum 1s"},
	} {
		code, _, stderr := runCLI(t, c.args...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want, c.args)
	}
}

// dispatchWith is a dispatch command line of one task with flags added.
func dispatchWith(flags ...string) []string {
	args := append(append([]string(nil), dispatchArgs...), "--run", "r", "--task", "t", "--attempt", "1", "--url", "https://w/x")
	return append(args, flags...)
}

// A dispatcher over a PostgreSQL outbox with --export-to, left running,
// has its answered outcomes readable by DuckDB, through the docs' query on
// the exported tree, within a minute at the default export interval. The
// first dispatch may land just before a pass; the second is sent as soon
// as DuckDB saw the first, just after a pass, so it waits about a whole
// interval: the worst case. The seconds from the answer to DuckDB's row
// (node's start included) are logged (go test -v) for the docs.
//
// Time budget: about 35 s of wall time (one default interval), nearly all
// idle: one emulator, one dispatcher, one node process polling every
// 100 ms.
func TestBinaryDuckDBSeesAnExportedDispatchWithinAMinute(t *testing.T) {
	t.Parallel()
	node, modules := duckDBNode(t)
	script, err := filepath.Abs(filepath.Join("testdata", "duckdb_poll.cjs"))
	require.NoError(t, err)
	emu := startCLIEmulator(t)
	pg := postgresURL(t, "")
	code, _, stderr := runCLI(t, "migrate", "--outbox", pg)
	require.Equal(t, 0, code, stderr)
	tree := filepath.Join(t.TempDir(), "exported")
	args := append(append([]string(nil), dispatchArgs...), "--url", "https://w/x", "--outbox", pg, "--export-to", tree, "--from", "-", "--json")
	cmd := exec.Command(ctdispatchBinary(t), args...)
	cmd.Env = append(os.Environ(), emulatorEnv+"="+emu.Addr())
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var dispatchErr strings.Builder
	cmd.Stderr = &dispatchErr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})
	answers := bufio.NewReader(stdout)

	const deadline = time.Minute
	dispatchAndSee := func(task string) time.Duration {
		_, err := io.WriteString(stdin, `{"run":"fresh","task":"`+task+`","attempt":1}`+"\n")
		require.NoError(t, err)
		line, err := answers.ReadString('\n')
		require.NoError(t, err, dispatchErr.String())
		answered := time.Now()
		var answer struct {
			Outcome string
			ID      string `json:"dispatch_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &answer), line)
		require.Equal(t, "created", answer.Outcome, line)
		// The docs' query for every state of one ID, answered outcomes only.
		glob := filepath.Join(tree, "dispatch_outbox", "**", "*.parquet")
		sql := fmt.Sprintf(`SELECT dispatch_id, status FROM read_parquet('%s', hive_partitioning = true, union_by_name = true)
			WHERE dispatch_id = '%s' AND status IN ('created', 'already_existed') ORDER BY updated_at`, glob, answer.ID)
		poll := exec.Command(node, script, sql, fmt.Sprint(deadline.Seconds()))
		poll.Env = append(os.Environ(), "NODE_PATH="+modules)
		var pollErr strings.Builder
		poll.Stderr = &pollErr
		out, err := poll.Output()
		require.NoError(t, err, "DuckDB did not see the outcome within %s: %s", deadline, pollErr.String())
		took := time.Since(answered)
		var seen struct{ Row map[string]string }
		require.NoError(t, json.Unmarshal(out, &seen), string(out))
		require.Equal(t, map[string]string{"dispatch_id": answer.ID, "status": "created"}, seen.Row)
		require.LessOrEqual(t, took, deadline)
		return took
	}
	first := dispatchAndSee("a")
	second := dispatchAndSee("b")
	t.Logf("export interval %s: DuckDB saw the created row %.1f s after the answer (first dispatch), %.1f s (second, sent just after a pass)",
		pgbox.DefaultExportInterval, first.Seconds(), second.Seconds())

	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait(), dispatchErr.String())
}

// The exporter writes to a gs:// bucket as to a directory, and the bucket
// commands read and compact what it wrote (fake-gcs-server stands in for
// Cloud Storage). Time budget: a few seconds once the two binaries are
// built; 98 s with their builds on a 2-core machine at a load average of 28.
func TestBinaryExportToABucket(t *testing.T) {
	t.Parallel()
	gcs := startFakeGCS(t, "exported")
	emu := startCLIEmulator(t)
	pg := postgresURL(t, "")
	code, _, stderr := runCLI(t, "migrate", "--outbox", pg)
	require.Equal(t, 0, code, stderr)
	env := []string{gcsjson.EmulatorEnv + "=" + gcs, emulatorEnv + "=" + emu.Addr()}
	root := "gs://exported?prefix=pg/"
	res := runBinary(t, env, "", dispatchWith("--outbox", pg, "--export-to", root, "--json")...)
	require.Equal(t, 0, res.code, res.stderr)

	res = runBinary(t, env, "", "export", "--outbox", pg, "--to", root, "--once")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, "nothing to export\n", res.stdout, "the dispatcher's Close exported its records")
	res = runBinary(t, env, "", "query", "--outbox", root, "--run", "r", "--history", "--format", "csv")
	require.Equal(t, 0, res.code, res.stderr)
	require.Len(t, strings.Split(strings.TrimSpace(res.stdout), "\n"), 3, res.stdout)
	res = runBinary(t, env, "", "compact", "--outbox", root, "--full")
	require.Equal(t, 0, res.code, res.stderr)
	// The dispatcher's exporter wrote its two records in one batch, or in
	// two when a pass came between the pending record and the outcome (a
	// slower start of either process): the compaction folds them to one.
	require.Regexp(t, `(?m)^dispatch_outbox: [12] files, 2 rows, \d+ bytes -> 1 files, 1 rows, \d+ bytes; 0 dropped by retention$`, res.stdout)
}
