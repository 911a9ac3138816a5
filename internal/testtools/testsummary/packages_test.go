package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseGoTest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		args         []string
		ok           bool
		patterns     []string
		withPackages []string // the command with "p1" "p2" for its patterns
	}{
		{
			name: "flags before the patterns", args: []string{"go", "test", "-race", "-count=1", "-json", "./..."}, ok: true,
			patterns:     []string{"./..."},
			withPackages: []string{"go", "test", "-race", "-count=1", "-json", "p1", "p2"},
		},
		{
			name: "a flag's value is no pattern", args: []string{"go", "test", "-run", "TestX", "-timeout", "20m", "./a/", "-v", "./b/..."}, ok: true,
			patterns:     []string{"./a/", "./b/..."},
			withPackages: []string{"go", "test", "-run", "TestX", "-timeout", "20m", "-v", "p1", "p2"},
		},
		{
			name: "-test. spellings and = forms", args: []string{"/usr/local/go/bin/go", "test", "-test.run", "X", "--tags=pg", "-p", "2", "./x/"}, ok: true,
			patterns:     []string{"./x/"},
			withPackages: []string{"/usr/local/go/bin/go", "test", "-test.run", "X", "--tags=pg", "-p", "2", "p1", "p2"},
		},
		{
			name: "the test binary's flags after -args", args: []string{"go", "test", "./a/", "-args", "-v", "positional"}, ok: true,
			patterns:     []string{"./a/"},
			withPackages: []string{"go", "test", "p1", "p2", "-args", "-v", "positional"},
		},
		{
			name: "no pattern: the current directory", args: []string{"go", "test", "-json"}, ok: true,
			withPackages: []string{"go", "test", "-json", "p1", "p2"},
		},
		{name: "another go command", args: []string{"go", "vet", "./..."}},
		{name: "another program", args: []string{"sh", "-c", "go test ./..."}},
		{name: "nothing", args: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd, ok := parseGoTest(tt.args)
			require.Equal(t, tt.ok, ok)
			if !ok {
				return
			}
			require.Equal(t, tt.patterns, cmd.packagePatterns())
			require.Equal(t, tt.withPackages, cmd.withPackages([]string{"p1", "p2"}))
		})
	}
}

// planModule is a module of packages a, b and b/inner, with nothing to fetch.
func planModule(t *testing.T) goTool {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/m\n\ngo 1.26\n"), 0o644))
	for _, pkg := range []string{"a", "b", "b/inner"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, pkg), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, pkg, "p.go"), []byte("package "+filepath.Base(pkg)+"\n"), 0o644))
	}
	return goTool{dir: dir, env: append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=")}
}

func TestPlanPackages(t *testing.T) {
	t.Parallel()
	tool := planModule(t)
	tests := []struct {
		name      string
		args      []string
		except    []string
		every     time.Duration
		wantTotal int
		wantArgs  []string
		wantOut   string
		wantErr   string
	}{
		{
			name: "counted, the command as given", args: []string{"go", "test", "-race", "./..."}, every: 30 * time.Second,
			wantTotal: 3, wantArgs: []string{"go", "test", "-race", "./..."},
			wantOut: "testsummary: 3 packages to test (./...): a line for each as it ends, and every 30s the ones still running\n",
		},
		{
			name: "-except leaves packages out of the command", args: []string{"go", "test", "-race", "./...", "-args", "-x"}, except: []string{"./b/..."},
			wantTotal: 1, wantArgs: []string{"go", "test", "-race", "example.com/m/a", "-args", "-x"},
			wantOut: "testsummary: 1 package to test (./... except ./b/...): a line for each as it ends\n",
		},
		{
			name: "-except that leaves nothing is an error", args: []string{"go", "test", "./b/"}, except: []string{"./b/..."},
			wantErr: `-except "./b/..." leaves none of the packages of "./b/" to test`,
		},
		{
			name: "-except with a pattern go list refuses is an error", args: []string{"go", "test", "./..."}, except: []string{"./nowhere/"},
			wantErr: "-except: go list -f {{.ImportPath}} ./nowhere/: exit status 1: ",
		},
		{
			name: "without a count the run goes on", args: []string{"go", "test", "./nowhere/"},
			wantArgs: []string{"go", "test", "./nowhere/"},
			wantOut:  "testsummary: not counting the packages: go list -f {{.ImportPath}} ./nowhere/: exit status 1: ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd, ok := parseGoTest(tt.args)
			require.True(t, ok)
			var out bytes.Buffer
			total, args, err := planPackages(&out, tool, cmd, tt.except, tt.every)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantTotal, total)
			require.Equal(t, tt.wantArgs, args)
			require.True(t, strings.HasPrefix(out.String(), tt.wantOut), "output:\n%s\nwant it to start:\n%s", out.String(), tt.wantOut)
		})
	}
}
