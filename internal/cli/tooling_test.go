package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runTool runs a repository tool from the module root with extra
// environment variables and returns its exit code and combined output.
func runTool(t *testing.T, env []string, name string, args ...string) (int, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs repository tools; skipped with -short")
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), out.String()
	}
	require.NoError(t, err)
	return 0, out.String()
}

// The README script runs the sh blocks in order, leaves out the marked
// ones, fails on a broken command and stops what the blocks started.
func TestReadmeScript(t *testing.T) {
	t.Parallel()
	abs := func(name string) string {
		p, err := filepath.Abs(filepath.Join("testdata", "readme", name))
		require.NoError(t, err)
		return p
	}
	code, out := runTool(t, nil, "scripts/readme-test", abs("pass.md"))
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "readme-test: block 1, ")
	require.Contains(t, out, "readme-test: block 3, ")
	require.NotContains(t, out, "readme-test: block 2, ", "the marked block is skipped")

	pidFile := filepath.Join(t.TempDir(), "pid")
	code, out = runTool(t, []string{"READMETEST_PID_FILE=" + pidFile}, "scripts/readme-test", abs("fail.md"))
	require.Equal(t, 127, code, out)
	require.Contains(t, out, "no-such-command-anywhere: command not found")
	require.Contains(t, out, "readme-test: a block of "+abs("fail.md")+" failed (exit 127)")
	// Every file given is run, each in its own copy of the tree; the
	// status is the failed one's.
	code, out = runTool(t, []string{"READMETEST_PID_FILE=" + filepath.Join(t.TempDir(), "pid")},
		"scripts/readme-test", abs("fail.md"), abs("pass.md"))
	require.Equal(t, 127, code, out)
	require.Contains(t, out, "readme-test: a block of "+abs("fail.md")+" failed (exit 127)")
	require.Contains(t, out, "readme-test: every sh block of "+abs("pass.md")+" ran")

	// The background sleep of the failed run was stopped: it is gone, or
	// a zombie waiting for its new parent to reap it.
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid := strings.TrimSpace(string(b))
	require.Eventually(t, func() bool {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return true
		}
		_, rest, _ := strings.Cut(string(stat), ") ")
		return strings.HasPrefix(rest, "Z")
	}, 10*time.Second, 10*time.Millisecond, "the background sleep (pid %s) still runs", pid)
}

// Without a C compiler make test still runs the tests, without -race, and
// says why.
func TestMakeTestWithoutCCompiler(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("needs make: not installed")
	}
	// --no-print-directory: under an outer make (make test runs this
	// test) the inner one would announce its directory.
	// TEST_JSON: the outer make test keeps its own stream in bin/.
	saved := filepath.Join(t.TempDir(), "test.jsonl")
	code, out := runTool(t, []string{"CC=/nonexistent/cc", "TEST_PKGS=./naming/", "TEST_JSON=" + saved}, "make", "--no-print-directory", "test")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "make test: no C compiler (/nonexistent/cc) or cgo disabled: running without the race detector")
	require.Contains(t, out, "CGO_ENABLED=0 go test -count=1 -tags 'iceberg' -json ./naming/ | testsummary\n")
	require.Regexp(t, `\n[0-9]+ passed, 0 failed, 0 skipped\n$`, out)
	require.Contains(t, out, "testsummary: 1 package to test (./naming/): a line for each as it ends, and every 30s the ones still running\n")
	require.Contains(t, out, "[1/1] ok  \tgithub.com/ctdispatch/ctdispatch/naming\t")
	require.FileExists(t, saved)
}

// make test leaves the long suites to make test-long when it tests the
// whole module, and only then; CI runs both targets, so none is dropped.
func TestMakeTestLeavesLongSuitesToTestLong(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("needs make: not installed")
	}
	code, out := runTool(t, nil, "make", "--no-print-directory", "-n", "test")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "testsummary -fetch -except './internal/chaos/' -save bin/test.jsonl go test -race -count=1 -tags 'iceberg' -json ./...;")
	code, out = runTool(t, []string{"TEST_PKGS=./internal/chaos/"}, "make", "--no-print-directory", "-n", "test")
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, "-except")
	code, out = runTool(t, nil, "make", "--no-print-directory", "-n", "test-long")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "testsummary -fetch -save bin/test-long.jsonl go test -race -count=1 -tags 'iceberg' -json ./internal/chaos/;")
	ci, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	require.NoError(t, err)
	require.Regexp(t, `(?m)^make test\n(.*\n)*^make test-long$`, string(ci))
}
