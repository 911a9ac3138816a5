//go:build iceberg

package cli

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// A PostgreSQL outbox's export onto a root whose publication is on
// publishes its batches, and a batch taken over after a crash (its
// written mark cleared and its lease expired, as an exporter that died
// after writing its files leaves it) registers nothing twice: not before
// a compaction folded its file, nor after.
//
// Time budget: about 5 s after the binary is built.
func TestBinaryExportReplayPublishesNoRowTwice(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	env := []string{emulatorEnv + "=" + emu.Addr()}
	pg := postgresURL(t, "")
	res := runBinary(t, env, "", "migrate", "--outbox", pg)
	require.Equal(t, 0, res.code, res.stderr)
	var lines strings.Builder
	for i := range 20 {
		fmt.Fprintf(&lines, `{"run":"exp","task":"t%d","attempt":1}`+"\n", i)
	}
	requests := filepath.Join(t.TempDir(), "requests.jsonl")
	require.NoError(t, os.WriteFile(requests, []byte(lines.String()), 0o600))
	res = runBinary(t, env, "", append(append([]string(nil), dispatchArgs...), "--url", "https://w/x", "--outbox", pg, "--from", requests)...)
	require.Equal(t, 0, res.code, res.stderr)

	root := filepath.Join(t.TempDir(), "export")
	require.NoError(t, os.Mkdir(root, 0o700))
	res = runBinary(t, nil, "", "compact", "--outbox", root, "--iceberg")
	require.Equal(t, 0, res.code, res.stderr)
	res = runBinary(t, nil, "", "export", "--outbox", pg, "--to", root, "--once")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `^exported batch 1: dispatch_outbox (\d+) rows, timers 0 rows, deliveries 0 rows\ndispatch_outbox: iceberg: appended: \+8 -0 files -> snapshot \d+, 8 files\n$`, res.stdout)
	rows := regexp.MustCompile(`dispatch_outbox (\d+) rows`).FindStringSubmatch(res.stdout)[1]

	db, err := sql.Open("pgx", pg)
	require.NoError(t, err)
	defer db.Close()
	crash := func() {
		t.Helper()
		_, err := db.ExecContext(context.Background(), `UPDATE ctdispatch_export_batches SET written_at = NULL, lease_expires = now() - interval '1 second' WHERE batch = 1`)
		require.NoError(t, err)
	}
	cat := fileCatalog(t, root)
	check := func(wantRows string) {
		t.Helper()
		s, err := scanTable(context.Background(), cat, outbox.TableDispatch)
		require.NoError(t, err)
		require.Empty(t, s.twice)
		require.Len(t, s.ids, 20)
		require.Equal(t, wantRows, fmt.Sprint(s.rows))
	}

	crash()
	res = runBinary(t, nil, "", "export", "--outbox", pg, "--to", root, "--once")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `^exported batch 1: dispatch_outbox `+rows+` rows, timers 0 rows, deliveries 0 rows\ndispatch_outbox: iceberg: current: snapshot \d+, 8 files\n$`, res.stdout, "the batch's files (one per bucket) are kept, registered once")
	check(rows)

	res = runBinary(t, nil, "", "compact", "--outbox", root, "--full")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `(?m)^dispatch_outbox: iceberg: replaced: \+\d+ -8 files -> snapshot \d+, \d+ files$`, res.stdout)
	crash()
	res = runBinary(t, nil, "", "export", "--outbox", pg, "--to", root, "--once")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `\ndispatch_outbox: iceberg: current: `, res.stdout, "the folded file is not written again")
	check("20")
}
