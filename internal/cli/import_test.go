package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// import moves a file outbox into a PostgreSQL one: the repeat of an ID
// dispatched before the move is answered from the imported records, a
// second import copies nothing, and wrong sources are refused with the
// rule. About 3 s.
func TestImportCommand(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	pg := postgresURL(t, "")
	dir := t.TempDir()
	dispatch := func(outbox string) string {
		t.Helper()
		args := append(append([]string(nil), dispatchArgs...), "--outbox", outbox,
			"--run", "run1", "--task", "extract", "--attempt", "1", "--url", "https://worker.example/x", "--json")
		code, stdout, stderr := runWithEnv(t, emu.Addr(), "", args...)
		require.Equal(t, 0, code, stderr)
		var res struct{ Outcome string }
		require.NoError(t, json.Unmarshal([]byte(stdout), &res), stdout)
		return res.Outcome
	}
	require.Equal(t, "created", dispatch(dir))

	code, _, stderr := runCLI(t, "migrate", "--outbox", pg)
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{
		"dispatch_outbox: 2 read, 2 imported, 0 skipped\ntimers: 0 read, 0 imported, 0 skipped\ndeliveries: 0 read, 0 imported, 0 skipped\n",
		"dispatch_outbox: 2 read, 0 imported, 2 skipped\ntimers: 0 read, 0 imported, 0 skipped\ndeliveries: 0 read, 0 imported, 0 skipped\n",
	} {
		code, stdout, stderr := runCLI(t, "import", "--from", dir, "--outbox", pg)
		require.Equal(t, 0, code, stderr)
		require.Equal(t, want, stdout)
	}
	require.Equal(t, "already_existed", dispatch(pg))
	require.Len(t, emu.Tasks(dqQueue), 1)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"import", "--from", dir, "--outbox", dir}, "is not a PostgreSQL URL; want postgres://"},
		{[]string{"import", "--outbox", pg}, "--from is required"},
		{[]string{"import", "--from", pg, "--outbox", pg}, "is a PostgreSQL database; want the directory or bucket URL of a file outbox"},
	} {
		code, _, stderr := runCLI(t, c.args...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.want, c.args)
	}
}
