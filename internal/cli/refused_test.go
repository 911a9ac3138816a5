package cli

import (
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
)

// insertRow inserts, by SQL, a created dispatch row of run r and task
// into the default dispatch table, two days old, with cloudTaskID ("" for
// the ID's own hash: a row a dispatcher could have written).
func insertRow(t *testing.T, db *sql.DB, task, cloudTaskID string) {
	t.Helper()
	id := "dispatch:r:" + task + ":1"
	if cloudTaskID == "" {
		var err error
		cloudTaskID, err = naming.CloudTaskID(id)
		require.NoError(t, err)
	}
	at := time.Now().Add(-48 * time.Hour)
	_, err := db.ExecContext(t.Context(), `INSERT INTO ctdispatch_dispatch_outbox (dispatch_id, version, cloud_task_id, queue, run_id, task_key,
		attempt, kind, status, error_code, create_calls, payload_sha256, processor_uuid, created_at, updated_at)
		VALUES ($1, 1, $2, 'projects/p/locations/l/queues/q', 'r', $3, '1', '', 'created', '', 1, '', '', $4, $4)`, id, cloudTaskID, task, at)
	require.NoError(t, err)
}

// forgedLine is how a report names the forged row seq of task.
func forgedLine(t *testing.T, seq int, task string) string {
	t.Helper()
	id := "dispatch:r:" + task + ":1"
	want, err := naming.CloudTaskID(id)
	require.NoError(t, err)
	return fmt.Sprintf(`dispatch_outbox seq %d %q: cloud_task_id "d_forged" of %s is not the Cloud Tasks ID of that ID (want %q)`, seq, id, id, want)
}

// Rows no dispatcher can have written, inserted by SQL into a PostgreSQL
// outbox: "export --once" writes the real row, reports the others on one
// line (how many, a sample with the reason, the command to use) and exits
// 3; stats counts them; retain deletes the real row only; "export
// refused" lists them, then quarantines or deletes them.
func TestExportCommandReportsRefusedRows(t *testing.T) {
	t.Parallel()
	pg := postgresURL(t, "")
	tree := filepath.Join(t.TempDir(), "exported")
	code, _, stderr := runCLI(t, "migrate", "--outbox", pg)
	require.Equal(t, 0, code, stderr)
	db, err := sql.Open("pgx", pg)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	for i := range 7 {
		insertRow(t, db, fmt.Sprintf("f%d", i), "d_forged")
	}
	insertRow(t, db, "real", "")

	code, stdout, stderr := runCLI(t, "export", "--outbox", pg, "--to", tree, "--once")
	require.Equal(t, 3, code, stderr)
	require.Equal(t, "exported batch 1: dispatch_outbox 1 rows, timers 0 rows, deliveries 0 rows\n", stdout)
	var sample []string
	for i := range 5 {
		sample = append(sample, forgedLine(t, i+1, fmt.Sprintf("f%d", i)))
	}
	require.Equal(t, "ctdispatch: export refused 7 rows that no dispatcher can have written (dispatch_outbox 7): not written to Parquet, kept in the database, and kept from retain; "+
		strings.Join(sample, "; ")+`; and 2 more; list them with "ctdispatch export refused --outbox `+pg+`", then remove them with --quarantine or --delete`+"\n", stderr)
	code, stdout, stderr = runCLI(t, "stats", "--outbox", pg)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "dispatch_outbox: 0 rows not yet exported to Parquet, 7 refused (see \"ctdispatch export refused\")\ntimers: 0 rows not yet exported to Parquet\n",
		stdout[strings.LastIndex(stdout, "\n\n")+2:])
	code, stdout, stderr = runCLI(t, "stats", "--outbox", pg, "--format", "json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, strings.Split(stdout, "\n")[0], `"unexported":0,"refused":7}`)
	code, stdout, stderr = runCLI(t, "export", "--outbox", pg, "--to", tree, "--once")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "nothing to export\n", stdout, "refused rows are reported once, not claimed again")

	code, stdout, stderr = runCLI(t, "retain", "--outbox", pg, "--older-than", "24h")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "dispatch_outbox: 1 rows deleted\ntimers: 0 rows deleted\ndeliveries: 0 rows deleted\n", stdout, "the real row only")

	code, stdout, stderr = runCLI(t, "export", "refused", "--outbox", pg, "--limit", "2")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "dispatch_outbox: 7 rows refused\ntimers: 0 rows refused\ndeliveries: 0 rows refused\n"+
		forgedLine(t, 1, "f0")+"\n"+forgedLine(t, 2, "f1")+"\n… and 5 more (--limit 2)\n", stdout)
	code, stdout, stderr = runCLI(t, "export", "refused", "--outbox", pg, "--quarantine")
	require.Equal(t, 0, code, stderr)
	const q = `"public"."ctdispatch_export_quarantine"`
	require.Equal(t, "dispatch_outbox: 7 refused rows moved to "+q+"\ntimers: 0 refused rows moved to "+q+"\ndeliveries: 0 refused rows moved to "+q+"\n", stdout)
	var quarantined int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM `+q).Scan(&quarantined))
	require.Equal(t, 7, quarantined)
	code, stdout, stderr = runCLI(t, "export", "refused", "--outbox", pg)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "dispatch_outbox: 0 rows refused\ntimers: 0 rows refused\ndeliveries: 0 rows refused\n", stdout)

	insertRow(t, db, "g0", "d_forged")
	insertRow(t, db, "g1", "d_forged")
	code, _, stderr = runCLI(t, "export", "--outbox", pg, "--to", tree, "--once")
	require.Equal(t, 3, code, stderr)
	require.Contains(t, stderr, "ctdispatch: export refused 2 rows")
	code, stdout, stderr = runCLI(t, "export", "refused", "--outbox", pg, "--delete")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "dispatch_outbox: 2 refused rows deleted\ntimers: 0 refused rows deleted\ndeliveries: 0 refused rows deleted\n", stdout)
	var left int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM ctdispatch_dispatch_outbox`).Scan(&left))
	require.Equal(t, 0, left)
}

// Wrong uses of "export refused" are usage errors that say what is
// allowed.
func TestExportRefusedUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"export", "refused", "--outbox", dir}, "is not a PostgreSQL URL"},
		{[]string{"export", "refused", "--outbox", "postgres://h/db", "--delete", "--quarantine"}, "--delete and --quarantine exclude each other"},
		{[]string{"export", "refused", "--outbox", "postgres://h/db", "--limit", "-1"}, "--limit -1 is negative"},
		{[]string{"export", "refused", "extra"}, `unknown command "extra"`},
	} {
		code, _, stderr := runCLI(t, c.args...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want, c.args)
	}
}

// A long-running export shows warnings (refused rows, failed passes) on
// stderr even without -v, and nothing below them; with -v, the verbose
// logger is used as it is.
func TestWarningsShownWithoutVerbose(t *testing.T) {
	t.Parallel()
	var stderr strings.Builder
	env := Env{Err: &stderr}.withDefaults()
	log := warningsShown(&env)
	log.Info("not shown")
	log.Warn("shown", "rows", 3)
	require.Regexp(t, `^time=\S+ level=WARN msg=shown rows=3\n$`, stderr.String())
	verbose := slog.New(slog.NewTextHandler(&stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	env.Logger = verbose
	require.Same(t, verbose, warningsShown(&env))
}
