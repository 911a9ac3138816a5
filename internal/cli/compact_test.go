package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

func TestCompactCommand(t *testing.T) {
	t.Parallel()
	dir := seedOutbox(t)
	code, _, stderr := runCLI(t, "compact", "--outbox", dir, "--retention", "orders=7x")
	require.Equal(t, 2, code)
	require.Equal(t, "ctdispatch: --retention: retention \"orders=7x\": duration \"7x\": want a number of days (7d), a Go duration (36h) or 0\n", stderr)

	code, stdout, stderr := runCLI(t, "compact", "--outbox", dir, "--full")
	require.Equal(t, "", stderr, "no progress bar when stderr is not a terminal")
	require.Equal(t, 0, code)
	require.Regexp(t, `^dispatch_outbox/created_date=2026-03-01 b4of8: compacted: 1 files, 2 rows, \d+ bytes -> 1 files, 1 rows, \d+ bytes; 0 dropped by retention; runs 1 -> 1 \(full\)\n`+
		`dispatch_outbox/created_date=2026-03-01 b7of8: compacted: 1 files, 1 rows, \d+ bytes -> 1 files, 1 rows, \d+ bytes; 0 dropped by retention; runs 1 -> 1 \(full\)\n`+
		`dispatch_outbox: 2 files, 3 rows, \d+ bytes -> 2 files, 2 rows, \d+ bytes; 0 dropped by retention\n`+
		`dispatch_outbox: manifest written: 2 files, 2 row groups \(`+regexp.QuoteMeta(filepath.Join(dir, "_manifests", "dispatch_outbox"))+`\)\n`+
		`timers/created_date=2026-03-01 b2of8: compacted: 1 files, 1 rows, \d+ bytes -> 1 files, 1 rows, \d+ bytes; 0 dropped by retention; runs 1 -> 1 \(full\)\n`+
		`timers: 1 files, 1 rows, \d+ bytes -> 1 files, 1 rows, \d+ bytes; 0 dropped by retention\n`+
		`timers: manifest written: 1 files, 1 row groups \(`+regexp.QuoteMeta(filepath.Join(dir, "_manifests", "timers"))+`\)\n$`, stdout)

	// Nothing written since: every unit untouched. A unit held by another
	// compaction is skipped, and a foreign file is named (the unit of the
	// day's files without a bucket).
	lease := filepath.Join(dir, "_leases", "timers", "created_date=2026-03-01~b2of8.000000000007")
	require.NoError(t, os.MkdirAll(filepath.Dir(lease), 0o700))
	require.NoError(t, os.WriteFile(lease, []byte(`{"holder":"nightly on host2","expires":"2999-01-01T00:00:00Z"}`), 0o600))
	garbage := filepath.Join(dir, "dispatch_outbox", "created_date=2026-03-01", "garbage.parquet")
	require.NoError(t, os.WriteFile(garbage, []byte("not parquet"), 0o600))
	code, stdout, stderr = runCLI(t, "compact", "--outbox", dir)
	require.Equal(t, "ctdispatch: compaction is incomplete: 1 file skipped (damaged or foreign): "+garbage+" (not a readable Parquet file)\n", stderr,
		"the skipped file is named on stdout and in the error; log lines only with -v")
	require.Equal(t, 3, code, "what was skipped was not compacted")
	require.Equal(t, "dispatch_outbox/created_date=2026-03-01: untouched: no readable files\n"+
		"dispatch_outbox/created_date=2026-03-01 b4of8: untouched: runs within the tiers' bounds\n"+
		"dispatch_outbox/created_date=2026-03-01 b7of8: untouched: runs within the tiers' bounds\n"+
		"dispatch_outbox: skipped "+garbage+": not a readable Parquet file\n"+
		"dispatch_outbox: 0 files, 0 rows, 0 bytes -> 0 files, 0 rows, 0 bytes; 0 dropped by retention\n"+
		"dispatch_outbox: manifest up to date: 2 files, 2 row groups\n"+
		"timers/created_date=2026-03-01 b2of8: busy, skipped: held by compaction nightly on host2 until 2999-01-01T00:00:00Z\n"+
		"timers: 0 files, 0 rows, 0 bytes -> 0 files, 0 rows, 0 bytes; 0 dropped by retention\n"+
		"timers: manifest up to date: 1 files, 1 row groups\n", stdout)
	require.NoError(t, os.Remove(garbage))
	require.NoError(t, os.Remove(lease))

	code, stdout, _ = runCLI(t, "query", "--outbox", dir, "--dispatch-id", "dispatch:run1:extract:1", "--history", "--format", "csv")
	require.Equal(t, 0, code)
	require.Equal(t, 2, strings.Count(stdout, "\n"), "history folded to the latest state")

	// Retention 0 on the queue drops the terminal records.
	code, stdout, _ = runCLI(t, "compact", "--outbox", dir, "--retention", "orders=0")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "dispatch_outbox/created_date=2026-03-01 b4of8: dropped: all 1 rows past retention; 1 files")
	require.Contains(t, stdout, "dispatch_outbox/created_date=2026-03-01 b7of8: dropped: all 1 rows past retention; 1 files")
	require.Contains(t, stdout, "dispatch_outbox: 2 files, 2 rows")
	require.Contains(t, stdout, "-> 0 files, 0 rows, 0 bytes; 2 dropped by retention")
	code, _, _ = runCLI(t, "query", "--outbox", dir, "--run", "run1")
	require.Equal(t, 1, code)
	left, _ := filepath.Glob(filepath.Join(dir, "wal", "*"))
	require.Empty(t, left, "compact leaves no lock or log behind")
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	clock := clockwork.NewFakeClockAt(cliT0)
	p := &progressBar{w: &buf, now: clock.Now}
	p.update(outbox.TableDispatch, 50, 100)
	p.update(outbox.TableDispatch, 60, 100) // within 100ms: skipped
	clock.Advance(time.Second)
	p.update(outbox.TableDispatch, 100, 100)
	p.finish()
	require.Equal(t, "\rcompacting dispatch_outbox [###############               ]  50% 50/100 rows"+
		"\rcompacting dispatch_outbox [##############################] 100% 100/100 rows\n", buf.String())
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"256MiB": 256 << 20, "1GiB": 1 << 30, "64KiB": 64 << 10, "1000": 1000} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "0", "-1MiB", "12MB", "MiB"} {
		_, err := parseSize(in)
		require.EqualError(t, err, "size \""+in+"\": want a positive number of bytes, KiB, MiB or GiB (256MiB)")
	}
}
