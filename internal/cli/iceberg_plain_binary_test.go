package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The default build links no Iceberg or Arrow code (ADR 0017: iceberg-go
// costs every command its start-up) and says how to get a build that
// has it: compact's Iceberg flags are refused before anything changes,
// and on a root that publishes, stats still answers (with a warning) and
// compact compacts, then fails naming what it could not do. Builds the
// binary without tags whatever this test binary was built with; about
// 20 s, most of it the build.
func TestDefaultBuildRefusesIcebergAndSaysHowToBuildIt(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a binary; skipped with -short")
	}
	deps, err := exec.Command("go", "list", "-deps", "github.com/ctdispatch/ctdispatch/cmd/ctdispatch").CombinedOutput()
	require.NoError(t, err, "%s", deps)
	for _, pkg := range strings.Fields(string(deps)) {
		require.False(t, strings.HasPrefix(pkg, "github.com/apache/"), "the default build links %s", pkg)
	}

	bin := filepath.Join(t.TempDir(), "ctdispatch")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/ctdispatch/ctdispatch/cmd/ctdispatch").CombinedOutput()
	require.NoError(t, err, "%s", out)
	run := func(args ...string) (int, string, string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), emulatorEnv+"=")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if exit, ok := err.(*exec.ExitError); ok {
			code = exit.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return code, stdout.String(), stderr.String()
	}
	const refusal = "this ctdispatch was built without Iceberg publication; build one with: go build -tags iceberg -o bin/ctdispatch ./cmd/ctdispatch"

	root := filepath.Join(t.TempDir(), "outbox")
	require.NoError(t, os.MkdirAll(root, 0o755))
	for _, flags := range [][]string{{"--iceberg"}, {"--no-iceberg"}, {"--iceberg-catalog", "https://catalog.example/"}} {
		code, _, stderr := run(append([]string{"compact", "--outbox", root}, flags...)...)
		require.Equal(t, 1, code, flags)
		require.Equal(t, "ctdispatch: "+refusal+"\n", stderr, flags)
		require.NoDirExists(t, filepath.Join(root, "_iceberg"), flags)
	}

	// A root another build switched on.
	require.NoError(t, os.MkdirAll(filepath.Join(root, "_iceberg"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "_iceberg", "publication.json"), []byte(`{}`), 0o644))
	code, stdout, stderr := run("stats", "--outbox", root)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "dispatch_outbox")
	require.Equal(t, "ctdispatch: the outbox publishes Iceberg tables; their snapshots are not shown: "+refusal+"\n", stderr)
	code, _, stderr = run("compact", "--outbox", root)
	require.Equal(t, 1, code)
	require.Equal(t, "ctdispatch: iceberg publication: "+refusal+"\n", stderr)
	require.FileExists(t, filepath.Join(root, "_iceberg", "publication.json"))
}
