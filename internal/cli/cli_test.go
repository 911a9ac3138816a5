package cli

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// result is what one in-process run of the CLI produced.
type result struct {
	code           int
	stdout, stderr string
}

// run executes the CLI in-process with args and an environment holding
// env's variables.
func run(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, Env{
		Out:    &out,
		Err:    &errOut,
		Getenv: func(k string) string { return env[k] },
	})
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// golden compares got with testdata/name, or rewrites the file with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./internal/cli -update to create %s", path)
	require.Equal(t, string(want), got)
}

func TestRootHelp(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "--help")
	require.Equal(t, 0, res.code)
	require.Empty(t, res.stderr)
	require.Contains(t, res.stdout, "Available Commands:")
	require.Contains(t, res.stdout, "ctdispatch id dispatch:run1:extract:1")
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "frobnicate")
	require.Equal(t, 2, res.code)
	require.Empty(t, res.stdout)
	require.Equal(t, "ctdispatch: unknown command \"frobnicate\" for \"ctdispatch\"\n", res.stderr)
}

func TestUnknownFlagIsAUsageError(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "id", "--nope", "dispatch:r:t:1")
	require.Equal(t, 2, res.code)
	require.Empty(t, res.stdout)
	require.Equal(t, "ctdispatch: unknown flag: --nope\n", res.stderr)
}
