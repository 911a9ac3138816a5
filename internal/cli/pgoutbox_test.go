package cli

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// postgresURL returns a postgres:// URL of a new database (pgtest gives a
// key=value DSN over a Unix socket).
func postgresURL(t *testing.T, params string) string {
	t.Helper()
	kv := map[string]string{}
	for _, f := range strings.Fields(pgtest.New(t)) {
		k, v, _ := strings.Cut(f, "=")
		kv[k] = v
	}
	q := url.Values{"host": {kv["host"]}, "port": {kv["port"]}, "sslmode": {kv["sslmode"]}}
	return "postgres://" + kv["user"] + "@/" + kv["dbname"] + "?" + q.Encode() + params
}

// A PostgreSQL outbox through the commands a user runs: migrate, dispatch
// twice (the repeat is answered from the database), query, recover,
// retain; and a clear refusal where it does not apply. About 3 s.
func TestPostgresOutboxCommands(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	pg := postgresURL(t, "&ctdispatch_schema=jobs&ctdispatch_table_prefix=cd_")

	code, stdout, stderr := runCLI(t, "migrate", "--outbox", pg)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "outbox table \"jobs\".\"cd_dispatch_outbox\" ready\noutbox table \"jobs\".\"cd_timers\" ready\noutbox table \"jobs\".\"cd_deliveries\" ready\nintents table \"jobs\".\"cd_intents\" ready\n", stdout)

	args := append(append([]string(nil), dispatchArgs...), "--outbox", pg,
		"--run", "run1", "--task", "extract", "--attempt", "1", "--url", "https://worker.example/x", "--json")
	var outcomes []string
	for _, durability := range []string{"strict", "overlapped"} {
		code, stdout, stderr := runWithEnv(t, emu.Addr(), "", append(args, "--durability", durability)...)
		require.Equal(t, 0, code, stderr)
		var res struct{ Outcome string }
		require.NoError(t, json.Unmarshal([]byte(stdout), &res), stdout)
		outcomes = append(outcomes, res.Outcome)
	}
	require.Equal(t, []string{"created", "already_existed"}, outcomes)
	require.Len(t, emu.Tasks(dqQueue), 1)

	code, stdout, stderr = runCLI(t, "query", "--outbox", pg, "--run", "run1", "--history", "--format", "csv")
	require.Equal(t, 0, code, stderr)
	var statuses []string
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n")[1:] {
		statuses = append(statuses, strings.Split(line, ",")[9])
	}
	require.Equal(t, []string{"pending", "created"}, statuses, "the repeat wrote nothing")

	code, stdout, stderr = runCLI(t, "stats", "--outbox", pg, "--format", "json")
	require.Equal(t, 0, code, stderr)
	var st struct {
		Table    string
		Rows     int64
		IDs      int64
		ByStatus map[string]int64 `json:"by_status"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.Split(stdout, "\n")[0]), &st), stdout)
	require.Equal(t, "dispatch_outbox", st.Table)
	require.Equal(t, int64(2), st.Rows)
	require.Equal(t, int64(1), st.IDs)
	require.Equal(t, map[string]int64{"created": 1}, st.ByStatus)

	code, stdout, stderr = runWithEnv(t, emu.Addr(), "", "recover", "--outbox", pg, "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"stale":0`)

	code, stdout, stderr = runCLI(t, "retain", "--outbox", pg, "--older-than", "1h")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "dispatch_outbox: 0 rows deleted\ntimers: 0 rows deleted\ndeliveries: 0 rows deleted\n", stdout)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"compact", "--outbox", pg}, "compact works on a file or bucket outbox; --outbox postgres://postgres@/"},
		{[]string{"console", "--worker-outbox", pg}, "--worker-outbox postgres://postgres@/"},
		{append(append([]string(nil), args...), "--durability", "interval"), "--durability interval does not apply to a PostgreSQL outbox"},
		{append(append([]string(nil), args...), "--log-dir", t.TempDir()), "--log-dir is the write-ahead log of a file or bucket outbox; a PostgreSQL outbox has none"},
		{[]string{"migrate", "--outbox", "./outbox"}, `--outbox "./outbox" is not a PostgreSQL URL`},
		{[]string{"migrate", "--outbox", strings.Replace(pg, "=jobs", "=Bad", 1)}, "--outbox: ctdispatch_schema=Bad is not a plain identifier"},
		{[]string{"migrate", "--outbox", pg + "&ctdispatch_schema=jobs"}, "--outbox: ctdispatch_schema is given 2 times; give it once"},
		{[]string{"retain", "--outbox", pg}, "--older-than 0s is not positive"},
	} {
		code, _, stderr := runWithEnv(t, emu.Addr(), "", c.args...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want, c.args)
	}
}

// A dispatch a Go program recorded in its transaction is created by
// "ctdispatch relay --once" after commit, once; usage errors name the
// flag. About 2 s.
func TestRelayCommand(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	pg := postgresURL(t, "")
	commitDispatches(t, emu, pg, "load")

	relay := []string{"relay", "--outbox", pg, "--project", "p", "--location", "europe-west1", "--queues", "work,other", "--once"}
	code, stdout, stderr := runWithEnv(t, emu.Addr(), "", append(relay, "--json")...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, `{"already_existed":0,"cancelled":0,"claimed":1,"created":1,"errors":0,"failed":0,"moved":0}`+"\n", stdout)
	require.Len(t, emu.Tasks(dqQueue), 1)
	code, stdout, stderr = runWithEnv(t, emu.Addr(), "", relay...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "0 claimed: 0 created, 0 already existed, 0 failed, 0 cancelled, 0 moved on, 0 errors\n", stdout)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"relay", "--outbox", "./outbox", "--project", "p", "--location", "l", "--queue", "q"}, `--outbox "./outbox" is not a PostgreSQL URL`},
		{[]string{"relay", "--outbox", pg, "--project", "p", "--location", "l"}, "--queue or --queues is required"},
		{[]string{"relay", "--outbox", pg, "--location", "l", "--queue", "q"}, "--project is required"},
		{[]string{"relay", "--outbox", pg, "--project", "p", "--location", "l", "--queue", "q", "--interval", "0s"}, "--interval 0s must be positive"},
	} {
		code, _, stderr := runWithEnv(t, emu.Addr(), "", c.args...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want, c.args)
	}
}

// On a database "ctdispatch migrate" has not run on, every command that
// reads or writes the outbox answers with the migrate hint and nothing
// else: no "nothing to export" or "0 rows deleted" before it, no raw
// "relation … does not exist (42P01)", and nothing dispatched. Then
// $CTDISPATCH_OUTBOX (no --outbox on the command line) migrates it.
func TestUnmigratedDatabaseGetsTheMigrateHint(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	pg := postgresURL(t, "")
	hint := "ctdispatch: outbox " + pg + `: pgbox: the outbox tables do not exist; create them with "ctdispatch migrate --outbox postgres://…" or pgbox.Migrate` + "\n"
	for _, args := range [][]string{
		{"export", "--outbox", pg, "--to", t.TempDir(), "--once"},
		{"retain", "--outbox", pg, "--older-than", "1h"},
		{"stats", "--outbox", pg},
		{"query", "--outbox", pg, "--run", "run1"},
		{"import", "--from", t.TempDir(), "--outbox", pg},
		{"relay", "--outbox", pg, "--project", "p", "--location", "europe-west1", "--queue", "work", "--once"},
		append(append([]string(nil), dispatchArgs...), "--outbox", pg, "--run", "run1", "--task", "t", "--attempt", "1", "--url", "https://worker.example/x"),
	} {
		code, stdout, stderr := runWithEnv(t, emu.Addr(), "", args...)
		require.Equal(t, 1, code, "%v: %s", args, stderr)
		require.Empty(t, stdout, args)
		require.Equal(t, hint, stderr, args)
	}
	require.Empty(t, emu.Tasks(dqQueue))

	code, stdout, stderr := runIn(t, map[string]string{outboxEnv: pg}, "migrate")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "intents table \"public\".\"ctdispatch_intents\" ready\n")
	code, _, stderr = runIn(t, map[string]string{outboxEnv: pg}, "stats")
	require.Equal(t, 0, code, stderr)
}

// commitDispatches migrates the outbox at pg with "ctdispatch migrate",
// then records a dispatch of each of keys (run "run1", attempt 1) in one
// committed transaction, as a Go program with a dispatcher of its own
// that relays nothing would, and returns the database, its outbox and
// the IDs.
func commitDispatches(t *testing.T, emu *emulator.Server, pg string, keys ...string) (*sql.DB, *pgbox.Outbox, []string) {
	t.Helper()
	code, _, stderr := runCLI(t, "migrate", "--outbox", pg)
	require.Equal(t, 0, code, stderr)
	db, err := sql.Open("pgx", pg)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	box, err := pgbox.New(db, pgbox.Config{})
	require.NoError(t, err)
	d, err := cloudtasks.NewDispatcher(t.Context(), box, &cloudtasks.Config{Project: "p", Location: "europe-west1", Queue: "work",
		EmulatorAddr: emu.Addr(), NoRelay: true})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	var ids []string
	for _, key := range keys {
		res, err := d.DispatchTx(t.Context(), pgbox.SQLTx(tx), cloudtasks.DispatchRequest{RunID: "run1", TaskKey: key,
			Identity: naming.Attempt(1), Task: cloudtasks.Task{URL: "https://worker.example/load"}})
		require.NoError(t, err)
		ids = append(ids, res.ID)
	}
	require.NoError(t, tx.Commit())
	return db, box, ids
}

// "ctdispatch relay" given SIGTERM mid-batch (six intents claimed, each
// create taking a second, two at a time) drains: it releases those it did
// not start, lets those in flight finish, exits 0 and leaves nothing
// claimed; "relay --once" then creates the rest. Each task is created
// once. The signal waits for the claim and for the first task to exist,
// so at least one create has run whatever the machine's speed. About 5 s
// (builds the binary).
func TestRelayDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	pg := postgresURL(t, "")
	db, box, ids := commitDispatches(t, emu, pg, "k0", "k1", "k2", "k3", "k4", "k5")
	// Each create takes a second: the relay is mid-batch when the signal
	// comes.
	require.NoError(t, emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{{Methods: []string{"CreateTask"}, Rate: 1, Latency: time.Second}}}))

	cmd := exec.Command(ctdispatchBinary(t), "relay", "--outbox", pg, "--project", "p", "--location", "europe-west1", "--queue", "work",
		"--concurrency", "2", "--emulator", emu.Addr())
	var errb bytes.Buffer
	cmd.Stderr = &errb
	require.NoError(t, cmd.Start())
	claims := func() (claimed, free int) {
		require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FILTER (WHERE claimed_by IS NOT NULL), count(*) FILTER (WHERE claimed_by IS NULL)
			FROM `+pgbox.IntentTableName(pgbox.Config{})).Scan(&claimed, &free))
		return claimed, free
	}
	require.Eventually(t, func() bool { claimed, _ := claims(); return claimed == 6 }, time.Minute, 5*time.Millisecond)
	require.Eventually(t, func() bool { return len(emu.Tasks(dqQueue)) > 0 }, time.Minute, 5*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), errb.String())
	require.Contains(t, errb.String(), "stopping: releasing the intents not started, finishing the calls in flight (at most --drain-timeout 30s)\nstopped: nothing left claimed\n")
	claimed, free := claims()
	require.Zero(t, claimed, "nothing left claimed")
	finished := len(emu.Tasks(dqQueue))
	require.Equal(t, 6, finished+free, "the calls in flight finished, the rest were released")
	require.Positive(t, finished)

	require.NoError(t, emu.SetFaults(emulator.Faults{}))
	code, stdout, stderr := runWithEnv(t, emu.Addr(), "", "relay", "--outbox", pg, "--project", "p", "--location", "europe-west1", "--queue", "work", "--once")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, fmt.Sprintf("%d claimed: %d created, 0 already existed, 0 failed, 0 cancelled, 0 moved on, 0 errors\n", free, free), stdout)
	require.Len(t, emu.Tasks(dqQueue), 6)
	for _, id := range ids {
		hist, err := box.Lookup(t.Context(), outbox.Query{ID: id, History: true})
		require.NoError(t, err)
		statuses := make([]outbox.Status, len(hist))
		for i, r := range hist {
			statuses[i] = r.Status
		}
		require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusCreated}, statuses, id)
	}
}
