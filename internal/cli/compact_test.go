package cli

import (
	"bytes"
	"path/filepath"
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

	code, stdout, stderr := runCLI(t, "compact", "--outbox", dir)
	require.Equal(t, "", stderr, "no progress bar when stderr is not a terminal")
	require.Equal(t, 0, code)
	require.Regexp(t, `^dispatch_outbox: 1 files, 3 rows, \d+ bytes -> 1 files, 2 rows, \d+ bytes; 0 dropped by retention\n`+
		`timers: 1 files, 1 rows, \d+ bytes -> 1 files, 1 rows, \d+ bytes; 0 dropped by retention\n$`, stdout)

	code, stdout, _ = runCLI(t, "query", "--outbox", dir, "--dispatch-id", "dispatch:run1:extract:1", "--history", "--format", "csv")
	require.Equal(t, 0, code)
	require.Equal(t, 2, strings.Count(stdout, "\n"), "history folded to the latest state")

	// Retention 0 on the queue drops the terminal records.
	code, stdout, _ = runCLI(t, "compact", "--outbox", dir, "--retention", "orders=0")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "dispatch_outbox: 1 files, 2 rows")
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
