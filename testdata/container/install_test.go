package container_test

import (
	"archive/zip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// repoEnv is the root of the ctdispatch checkout whose committed tree
// TestGoInstallFromModuleProxy publishes.
const repoEnv = "CTDISPATCH_TEST_REPO"

// modulePath is the module users install.
const modulePath = "github.com/ctdispatch/ctdispatch"

// TestGoInstallFromModuleProxy checks the line the README gives users,
// go install github.com/ctdispatch/ctdispatch/cmd/ctdispatch@latest, and
// what the installed binary says about itself. The committed tree (HEAD)
// is published in a module proxy laid out in a temporary directory, ahead
// of the machine's own proxy, which serves the dependencies (they are
// checked against the published go.sum).
//
// The go command keeps what it downloads in the shared module cache and
// never fetches a version it holds again, so each run publishes a version
// of its own (a pre-release, which @latest picks when the list has no
// release) and removes it from the cache when done; with one fixed
// version a second run would install the first run's tree.
func TestGoInstallFromModuleProxy(t *testing.T) {
	t.Parallel()
	repo := getenv(t, repoEnv)
	version := fmt.Sprintf("v0.1.0-ci.%d", time.Now().UnixNano())
	proxy := t.TempDir()
	publish(t, proxy, repo, version)
	t.Cleanup(func() { forget(t, version) })

	goproxy, err := exec.Command("go", "env", "GOPROXY").Output()
	require.NoError(t, err)
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	require.NoError(t, err)

	gobin := t.TempDir()
	install := exec.Command("go", "install", modulePath+"/cmd/ctdispatch@latest")
	install.Dir = t.TempDir() // outside any module, as a user's shell is
	install.Env = append(os.Environ(),
		"GOBIN="+gobin,
		"GOPROXY=file://"+filepath.ToSlash(proxy)+","+strings.TrimSpace(string(goproxy)),
		// The checksum database has never seen this version; only the
		// published module skips it, not its dependencies.
		"GONOSUMDB="+modulePath,
		"GOFLAGS=-mod=mod",
		"GOWORK=off",
		// The build cache then holds the dependencies from make build
		// (CGO_ENABLED=0 too), so only ctdispatch's packages compile.
		"CGO_ENABLED=0",
	)
	start := time.Now()
	out, err := install.CombinedOutput()
	require.NoError(t, err, "go install: %s", out)
	t.Logf("go install from the module proxy took %s", time.Since(start).Round(time.Second))

	got, err := exec.Command(filepath.Join(gobin, "ctdispatch"), "--version").Output()
	require.NoError(t, err)
	// A module built from a proxy carries no VCS stamp: the version is
	// the whole story.
	require.Equal(t, "ctdispatch "+version+", "+strings.TrimSpace(string(goVersion))+"\n", string(got))
}

// forget removes version of the module from the shared module cache:
// the extracted tree (read-only, as the go command leaves it) and the
// downloaded files.
func forget(t *testing.T, version string) {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	require.NoError(t, err)
	cache := strings.TrimSpace(string(out))
	tree := filepath.Join(cache, filepath.FromSlash(modulePath)+"@"+version)
	_ = filepath.WalkDir(tree, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o755)
		}
		return nil
	})
	require.NoError(t, os.RemoveAll(tree))
	dir := filepath.Join(cache, "cache", "download", filepath.FromSlash(modulePath), "@v")
	downloads, err := filepath.Glob(filepath.Join(dir, version+".*"))
	require.NoError(t, err)
	for _, f := range append(downloads, filepath.Join(dir, "list")) {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			require.NoError(t, err)
		}
	}
	// The directories go too when no other version is left in them.
	for _, d := range []string{dir, filepath.Dir(dir), filepath.Dir(filepath.Dir(dir)), filepath.Dir(tree)} {
		_ = os.Remove(d)
	}
}

// publish lays out version of the module, made from repo's committed tree
// at HEAD, in the directory form of the module proxy protocol (what
// GOPROXY=file://DIR reads): @v/list, and the version's .info, .mod and
// .zip.
func publish(t *testing.T, proxy, repo, version string) {
	t.Helper()
	dir := filepath.Join(proxy, filepath.FromSlash(modulePath), "@v")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	zipPath := filepath.Join(dir, version+".zip")
	f, err := os.Create(zipPath)
	require.NoError(t, err)
	// The committed tree, not the working directory: bin/, node_modules
	// and other ignored files stay out, as they would in a release.
	// (git archive, since modzip.CreateFromVCS does not recognise a git
	// worktree, whose .git is a file.)
	tree := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive --format=tar HEAD | tar -x -C "$2"`, "sh", repo, tree)
	out, err := archive.CombinedOutput()
	require.NoError(t, err, "git archive: %s", out)
	err = modzip.CreateFromDir(f, module.Version{Path: modulePath, Version: version}, tree)
	require.NoError(t, f.Close())
	require.NoError(t, err)

	// The .mod file must be the zip's go.mod, byte for byte.
	zr, err := zip.OpenReader(zipPath)
	require.NoError(t, err)
	defer zr.Close()
	gomod, err := zr.Open(modulePath + "@" + version + "/go.mod")
	require.NoError(t, err)
	mod, err := io.ReadAll(gomod)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, version+".mod"), mod, 0o644))

	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, version+".info"), info, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "list"), []byte(version+"\n"), 0o644))
}
