package main

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// writeProxy lays out a module proxy in a directory (GOPROXY=file://dir),
// serving each module with a go.mod and one Go file.
func writeProxy(t *testing.T, dir string, mods ...module) {
	t.Helper()
	for _, m := range mods {
		at := filepath.Join(dir, escapeModule(m.Path), "@v")
		require.NoError(t, os.MkdirAll(at, 0o755))
		gomod := "module " + m.Path + "\n\ngo 1.21\n"
		var zipped bytes.Buffer
		zw := zip.NewWriter(&zipped)
		for _, file := range [][2]string{{"go.mod", gomod}, {"p.go", "package p\n"}} {
			// Stored, not compressed: the size the golden file shows does
			// not depend on the compressor.
			f, err := zw.CreateHeader(&zip.FileHeader{Name: m.Path + "@" + m.Version + "/" + file[0], Method: zip.Store})
			require.NoError(t, err)
			_, err = f.Write([]byte(file[1]))
			require.NoError(t, err)
		}
		require.NoError(t, zw.Close())
		v := escapeModule(m.Version)
		require.NoError(t, os.WriteFile(filepath.Join(at, "list"), []byte(m.Version+"\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(at, v+".info"), []byte(`{"Version":"`+m.Version+`","Time":"2026-01-02T03:04:05Z"}`), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(at, v+".mod"), []byte(gomod), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(at, v+".zip"), zipped.Bytes(), 0o644))
	}
}

// fetchWorld is a main module requiring mods, a proxy serving served, and
// an empty module cache, all in temporary directories.
func fetchWorld(t *testing.T, served []module, requires ...module) (goTool, string) {
	t.Helper()
	root := t.TempDir()
	proxy, cache, main := filepath.Join(root, "proxy"), filepath.Join(root, "cache"), filepath.Join(root, "main")
	writeProxy(t, proxy, served...)
	require.NoError(t, os.MkdirAll(main, 0o755))
	gomod := "module example.com/main\n\ngo 1.26\n\nrequire (\n"
	for _, m := range requires {
		gomod += "\t" + m.Path + " " + m.Version + "\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(main, "go.mod"), []byte(gomod+")\n"), 0o644))
	env := append(os.Environ(), "GOPROXY=file://"+filepath.ToSlash(proxy), "GOMODCACHE="+cache,
		"GOSUMDB=off", "GOFLAGS=-modcacherw", "GOTOOLCHAIN=local", "GOWORK=off")
	return goTool{dir: main, env: env}, cache
}

// stepClock is a clock that moves a second on every reading.
func stepClock() func() time.Time {
	var n atomic.Int64
	return func() time.Time {
		return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(n.Add(1)) * time.Second)
	}
}

// A first run fetches what the cache lacks, a line per module; the next
// finds everything there (the cache's spelling of "Dep" is "!dep").
func TestFetchModules(t *testing.T) {
	t.Parallel()
	dep, small := module{"example.com/Dep", "v1.0.0"}, module{"example.com/small", "v1.1.0"}
	tool, cache := fetchWorld(t, []module{dep, small}, dep, small)
	var out bytes.Buffer
	require.NoError(t, fetchModules(&out, tool, 1, stepClock()))
	require.NoError(t, fetchModules(&out, tool, 1, stepClock()))
	golden(t, "fetch.golden", strings.ReplaceAll(out.String(), cache, "$GOMODCACHE"))
	require.DirExists(t, filepath.Join(cache, "example.com", "!dep@v1.0.0"))
}

// A module the proxy lacks is reported, and the others still come.
func TestFetchModulesMissingFromProxy(t *testing.T) {
	t.Parallel()
	small, gone := module{"example.com/small", "v1.1.0"}, module{"example.com/gone", "v0.1.0"}
	tool, _ := fetchWorld(t, []module{small}, gone, small)
	var out bytes.Buffer
	require.NoError(t, fetchModules(&out, tool, 1, stepClock()))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Len(t, lines, 4, out.String())
	require.True(t, strings.HasPrefix(lines[1], "  [1/2] example.com/gone v0.1.0: not fetched: "), lines[1])
	require.Contains(t, lines[1], "example.com/gone@v0.1.0")
	require.Equal(t, "  [2/2] example.com/small v1.1.0: 370 B in 1s", lines[2])
	require.Equal(t, "modules: fetched 1 (370 B) in 5s; 1 could not be fetched (go test will say if it needs them)", lines[3])
}

// Outside a module there is no go.mod to read: an error, not a silent pass.
func TestFetchModulesOutsideAModule(t *testing.T) {
	t.Parallel()
	tool := goTool{dir: t.TempDir(), env: append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GO111MODULE=on")}
	err := fetchModules(&bytes.Buffer{}, tool, 1, stepClock())
	require.ErrorContains(t, err, "go mod edit -json")
}

func TestRequiredModules(t *testing.T) {
	t.Parallel()
	tool, _ := fetchWorld(t, nil, module{"example.com/a", "v1.0.0"}, module{"example.com/b", "v1.2.0"}, module{"example.com/c", "v0.3.0"})
	require.NoError(t, tool.command("mod", "edit", "-replace", "example.com/a=example.com/fork@v1.0.1", "-replace", "example.com/b=../b").Run())
	mods, err := requiredModules(tool)
	require.NoError(t, err)
	require.Equal(t, []module{{"example.com/fork", "v1.0.1"}, {"example.com/c", "v0.3.0"}}, mods)
}

func TestEscapeModule(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"github.com/BurntSushi/toml": "github.com/!burnt!sushi/toml",
		"v1.0.0-RC1":                 "v1.0.0-!r!c1",
		"golang.org/x/net":           "golang.org/x/net",
	}
	for in, want := range tests {
		require.Equal(t, want, escapeModule(in), in)
	}
}

func TestByteSize(t *testing.T) {
	t.Parallel()
	tests := map[int64]string{0: "0 B", 999: "999 B", 1000: "1.0 kB", 2_345_678: "2.3 MB", 912_000_000: "912.0 MB"}
	for n, want := range tests {
		require.Equal(t, want, byteSize(n), n)
	}
}
