package cli

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/ctdispatch/ctdispatch"

// listedPackage is a package of the module as go list shows it.
type listedPackage struct {
	path, dir            string
	files                []string // non-test Go files, for every system
	imports, testImports []string
	library              bool
}

// listModule lists the module's packages: a library package is one a user
// imports, everything but cmd/ and the program's top-level internal/.
func listModule(t *testing.T) []listedPackage {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the packages")
	}
	const format = "{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \" \"}} {{join .CgoFiles \" \"}} {{join .IgnoredGoFiles \" \"}}\t" +
		"{{join .Imports \" \"}}\t{{join .TestImports \" \"}} {{join .XTestImports \" \"}}"
	cmd := exec.Command(goBin, "list", "-f", format, module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	var pkgs []listedPackage
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		require.Len(t, f, 5, line)
		p := listedPackage{path: f[0], dir: f[1], imports: strings.Fields(f[3]), testImports: strings.Fields(f[4])}
		for _, name := range strings.Fields(f[2]) {
			if !strings.HasSuffix(name, "_test.go") {
				p.files = append(p.files, name)
			}
		}
		p.library = !strings.HasPrefix(p.path, module+"/cmd/") && !strings.HasPrefix(p.path, module+"/internal/")
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// The top-level internal/ is the program's (the CLI, the console, the
// chaos suite, the benchmark and their tools): no library package imports
// it, so what a library package needs lives under it (cloudtasks/internal,
// outbox/internal) or is public. Two exceptions, each named: the emulator's
// HTTP server shares the console's Host check, and the tests of the
// PostgreSQL stores start their throwaway database with the repository's
// test tools.
func TestLibraryImportsNoProgramPackage(t *testing.T) {
	t.Parallel()
	allowed := map[string]bool{module + "/cloudtasks/emulator " + module + "/internal/hostguard": true}
	var libraries int
	var wrong []string
	for _, p := range listModule(t) {
		if !p.library {
			continue
		}
		libraries++
		for _, imp := range p.imports {
			if strings.HasPrefix(imp, module+"/internal/") && !allowed[p.path+" "+imp] {
				wrong = append(wrong, p.path+" imports "+imp)
			}
		}
		for _, imp := range p.testImports {
			if strings.HasPrefix(imp, module+"/internal/") && !strings.HasPrefix(imp, module+"/internal/testtools/") {
				wrong = append(wrong, p.path+"'s tests import "+imp)
			}
		}
	}
	require.Greater(t, libraries, 20, "the module's library packages")
	require.Empty(t, wrong)
}

// envReaders are the calls that read the process's environment.
var envReaders = map[string][]string{
	"os":      {"Getenv", "LookupEnv", "Environ", "ExpandEnv"},
	"syscall": {"Getenv", "Environ"},
}

// No library package reads the environment: a program passes what it reads
// from its own variables in options (as ctdispatch sets
// parquetbox.CompactConfig.BeforeCommit from $CTDISPATCH_PAUSE). The
// look-ups of the Google and gocloud clients for credentials are theirs.
func TestLibraryReadsNoEnvironment(t *testing.T) {
	t.Parallel()
	var files int
	var reads []string
	for _, p := range listModule(t) {
		if !p.library {
			continue
		}
		for _, name := range p.files {
			files++
			reads = append(reads, environmentReads(t, filepath.Join(p.dir, name))...)
		}
	}
	require.Greater(t, files, 100, "the library's Go files")
	require.Empty(t, reads)
}

// environmentReads returns where the file at path calls one of
// envReaders, as path:line: pkg.Func.
func environmentReads(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	local := map[string]string{} // the file's name for os or syscall → its path
	for _, imp := range f.Imports {
		pkg, _ := strconv.Unquote(imp.Path.Value)
		if _, ok := envReaders[pkg]; !ok {
			continue
		}
		name := pkg
		if imp.Name != nil {
			name = imp.Name.Name
		}
		local[name] = pkg
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok || local[id.Name] == "" {
			return true
		}
		for _, fn := range envReaders[local[id.Name]] {
			if sel.Sel.Name == fn {
				found = append(found, fset.Position(sel.Pos()).String()+": "+local[id.Name]+"."+fn)
			}
		}
		return true
	})
	return found
}
