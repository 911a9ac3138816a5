package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// golden compares got with testdata/name, or rewrites that file under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), got)
}

// The streams under testdata are `go test -json` output of a small module
// (times and durations removed): package a passes with skips, b has a
// failing test, c has no tests, d does not build.
func TestRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		input    string
		ci       bool
		wantCode int
		wantTail string
	}{
		{
			name: "a failing test and a failed build fail the run", input: "run.jsonl",
			wantCode: 1, wantTail: "4 passed, 1 failed, 3 skipped\n",
		},
		{
			name: "skips alone pass outside CI", input: "skips.jsonl",
			wantCode: 0, wantTail: "  ./a TestSub/one: needs root: mounting a tmpfs\n3 passed, 0 failed, 3 skipped\n",
		},
		{
			name: "under CI a skip for want of a CI tool fails", input: "skips.jsonl", ci: true,
			wantCode: 1,
			wantTail: "FAIL: CI=true, and 1 tests skipped for want of a tool that .ci/run installs (chromium, node, duckdb, postgresql, podman, make):\n" +
				"  ./a TestSkipTool: needs chromium: no chromium binary on PATH\n" +
				"3 passed, 0 failed, 3 skipped\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in, err := os.ReadFile(filepath.Join("testdata", tt.input))
			require.NoError(t, err)
			in = bytes.ReplaceAll(in, []byte("example.com/ts"), []byte("github.com/ctdispatch/ctdispatch"))
			var out, errOut bytes.Buffer
			code := run([]string{"-status", "0"}, bytes.NewReader(in), &out, &errOut, tt.ci)
			require.Equal(t, tt.wantCode, code, out.String())
			require.True(t, strings.HasSuffix(out.String(), tt.wantTail), "output ends:\n%s\nwant:\n%s", out.String(), tt.wantTail)
			require.Empty(t, errOut.String())
		})
	}
}

// What plain go test would print comes first: package lines, build
// errors, the failing test's lines with its --- FAIL line first, each
// package's result line last and after how many packages have ended (the
// total is not known when the stream comes on stdin); then the skips with
// their reasons.
func TestRunGolden(t *testing.T) {
	t.Parallel()
	in, err := os.Open(filepath.Join("testdata", "run.jsonl"))
	require.NoError(t, err)
	defer in.Close()
	var out bytes.Buffer
	require.Equal(t, 1, run([]string{"-status", "0"}, in, &out, &out, false))
	golden(t, "run.golden", out.String())
}

// A command that fails without reporting any test fails the run, and the
// last line still counts.
func TestRunCommandFailure(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := run([]string{"-status", "0", "sh", "-c", "echo 'go: unknown flag -x'; exit 2"}, strings.NewReader(""), &out, &errOut, false)
	require.Equal(t, 1, code)
	require.Equal(t, "go: unknown flag -x\n0 passed, 0 failed, 0 skipped\n", out.String())
}

func TestSkipReason(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		lines []string
		want  string
	}{
		"the last log line is the skip message": {
			lines: []string{"=== RUN   TestX\n", "    x_test.go:6: before\n", "    x_test.go:7: needs node: node is not installed\n", "--- SKIP: TestX (0.00s)\n"},
			want:  "needs node: node is not installed",
		},
		"continuation lines are joined": {
			lines: []string{"    x_test.go:7: cannot: one\n", "        two\n", "    --- SKIP: TestX/sub (0.00s)\n"},
			want:  "cannot: one two",
		},
		"a bare SkipNow": {
			lines: []string{"=== RUN   TestX\n", "--- SKIP: TestX (0.00s)\n"},
			want:  "(no reason given)",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, skipReason(tt.lines))
		})
	}
}

func TestMissingCITool(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"needs chromium: no chromium binary on PATH":  "chromium",
		"needs postgresql: initdb is not on PATH":     "postgresql",
		"needs root: mounting a tmpfs":                "",
		"node is not installed":                       "",
		"needs node":                                  "",
		"set CTDISPATCH_BENCH=1 to measure; needs x:": "",
	}
	for reason, want := range tests {
		tool, ok := missingCITool(reason)
		require.Equal(t, want != "", ok, reason)
		require.Equal(t, want, tool, reason)
	}
}

// -save keeps the stream as it came, for a later look at what took long.
func TestRunSave(t *testing.T) {
	t.Parallel()
	in, err := os.ReadFile(filepath.Join("testdata", "run.jsonl"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "bin", "test.jsonl")
	var out bytes.Buffer
	require.Equal(t, 1, run([]string{"-status", "0", "-save", path}, bytes.NewReader(in), &out, &out, false))
	saved, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(in), string(saved))
}

// Bad flags are refused with what was wrong, and the last line still counts.
func TestRunRefusesBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{
			name: "a negative status interval", args: []string{"-status", "-1s"}, wantCode: 2,
			wantErr: `invalid value "-1s" for flag -status: negative; want an interval, or 0 for no status lines`,
		},
		{
			name: "an unknown flag", args: []string{"-fetc"}, wantCode: 2,
			wantErr: "flag provided but not defined: -fetc",
		},
		{
			name: "-except without a go test command", args: []string{"-except", "./internal/chaos/", "sh", "-c", "true"}, wantCode: 1,
			wantErr: "testsummary: -except needs a go test command to take packages from",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			require.Equal(t, tt.wantCode, run(tt.args, strings.NewReader(""), &out, &errOut, false))
			require.Contains(t, errOut.String(), tt.wantErr)
			require.Equal(t, "0 passed, 0 failed, 0 skipped\n", out.String())
		})
	}
}
