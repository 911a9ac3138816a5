package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// nobody is the user the unreadable-partition case runs as: tests run as
// root here, and root reads a 0000 directory.
const nobody = 65534

// runAsNobody runs the built binary as user nobody through setpriv, over
// an outbox it has made nobody's, or skips the test where it cannot.
func runAsNobody(t *testing.T, outboxDir string, args ...string) binResult {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the binary as another user; as a user, the 0000 directory is unreadable already (run the test as root to cover it)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux) to run the binary as nobody")
	}
	// nobody must reach the binary and the outbox: a copy in a directory
	// of its own, and the temporary directories above the outbox opened.
	bin := filepath.Join(t.TempDir(), "ctdispatch")
	src, err := os.ReadFile(ctdispatchBinary(t))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, src, 0o755))
	for _, d := range []string{filepath.Dir(bin), filepath.Dir(filepath.Dir(bin)), filepath.Dir(outboxDir), filepath.Dir(filepath.Dir(outboxDir))} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	require.NoError(t, filepath.WalkDir(outboxDir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	}))
	cmd := exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--", bin}, args...)...)
	cmd.Env = append(os.Environ(), emulatorEnv+"=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	res := binResult{stdout: out.String(), stderr: errb.String()}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		res.code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return res
}

// Odd trees under a table are reported, never silent: query, stats and
// compact, run as a user runs them, each name the entry they skipped on
// stderr (and in a skipped_dir JSON line) and exit 3, as they do for a
// damaged file. The records inside are not served: a symbolic link is not
// followed (a link may lead outside the outbox, or to one partition twice).
//
// Time budget: about 3 s (one binary build, shared; 12 short runs).
func TestBinaryReportsEntriesOutsideTheLayout(t *testing.T) {
	t.Parallel()
	const (
		notPartition = "not a partition directory; want created_date=YYYY-MM-DD with a real date"
		link         = "a symbolic link; partitions are read only as real directories"
		unreadable   = "cannot read the partition directory: permission denied"
	)
	tests := []struct {
		name string
		// plant makes the odd entry under the seeded outbox's dispatch
		// table and returns its path as reported.
		plant  func(t *testing.T, table string) string
		reason string
		// ids is what stats counts in the dispatch table: the seeded two,
		// or none when their partition is the unreadable one.
		ids float64
		// queryRows is what query --run run1 finds: 2 dispatches and a
		// timer, or only the timer.
		queryRows int
		asNobody  bool
	}{
		{"symlinked partition", func(t *testing.T, table string) string {
			target := filepath.Join(t.TempDir(), "created_date=2026-03-02")
			require.NoError(t, os.CopyFS(target, os.DirFS(filepath.Join(table, "created_date=2026-03-01"))))
			require.NoError(t, os.Symlink(target, filepath.Join(table, "created_date=2026-03-02")))
			return filepath.Join(table, "created_date=2026-03-02") + "/"
		}, link, 2, 3, false},
		{"garbage name", func(t *testing.T, table string) string {
			require.NoError(t, os.CopyFS(filepath.Join(table, "created_date=garbage"), os.DirFS(filepath.Join(table, "created_date=2026-03-01"))))
			return filepath.Join(table, "created_date=garbage") + "/"
		}, notPartition, 2, 3, false},
		{"impossible date", func(t *testing.T, table string) string {
			require.NoError(t, os.Mkdir(filepath.Join(table, "created_date=2026-13-45"), 0o700))
			return filepath.Join(table, "created_date=2026-13-45") + "/"
		}, notPartition, 2, 3, false},
		{"unreadable partition", func(t *testing.T, table string) string {
			return filepath.Join(table, "created_date=2026-03-01") + "/"
		}, unreadable, 0, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := seedOutbox(t)
			table := filepath.Join(dir, "dispatch_outbox")
			where := tt.plant(t, table)
			run := func(args ...string) binResult { return runBinary(t, nil, "", args...) }
			if tt.asNobody {
				run = func(args ...string) binResult {
					require.NoError(t, os.Chmod(filepath.Join(table, "created_date=2026-03-01"), 0o700))
					res := runAsNobody(t, dir, "--version") // makes the outbox nobody's
					require.Equal(t, 0, res.code, res.stderr)
					require.NoError(t, os.Chmod(filepath.Join(table, "created_date=2026-03-01"), 0))
					return runAsNobody(t, dir, args...)
				}
			}
			incomplete := "the answer may be incomplete: 1 entry skipped (damaged, foreign or outside the table layout): " + where + " (" + tt.reason + ")\n"

			// query: the seeded records, or none if their partition is unreadable.
			res := run("query", "--outbox", dir, "--run", "run1", "--format", "json")
			require.Equal(t, 3, res.code, res.stderr)
			lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
			var skipped map[string]any
			require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &skipped))
			require.Equal(t, map[string]any{"skipped_dir": where, "reason": tt.reason, "damaged": false}, skipped)
			require.Equal(t, "ctdispatch: "+incomplete, res.stderr)
			require.Len(t, lines, tt.queryRows+1, "the records read, then the skipped entry")

			// stats
			res = run("stats", "--outbox", dir, "--format", "json")
			require.Equal(t, 3, res.code, res.stderr)
			require.Equal(t, "ctdispatch: "+incomplete, res.stderr)
			lines = strings.Split(strings.TrimSpace(res.stdout), "\n")
			require.Len(t, lines, 3, "one line per table, then the skipped entry")
			var dispatch map[string]any
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &dispatch))
			require.Equal(t, tt.ids, dispatch["ids"])
			require.NoError(t, json.Unmarshal([]byte(lines[2]), &skipped))
			require.Equal(t, where, skipped["skipped_dir"])

			// compact: the entry is named on stdout and in the error, and left alone.
			res = run("compact", "--outbox", dir)
			require.Equal(t, 3, res.code, res.stderr)
			require.Equal(t, "ctdispatch: compaction is incomplete: 1 entry skipped (damaged, foreign or outside the table layout): "+where+" ("+tt.reason+")\n", res.stderr)
			require.Contains(t, res.stdout, "dispatch_outbox: skipped "+where+": "+tt.reason+"\n")
			_, err := os.Lstat(strings.TrimSuffix(where, "/"))
			require.NoError(t, err)
		})
	}
}
