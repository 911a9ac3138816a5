package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// goTestCommand is a `go test` command line, with where its package
// patterns are.
type goTestCommand struct {
	args     []string
	patterns []int // indexes in args of the package patterns
	argsAt   int   // index of -args (the test binary's flags follow), or len(args)
}

// valueFlags are the go test flags that take a value, which may follow
// as the next argument ("-run TestX"): that argument is no package.
var valueFlags = []string{
	"C", "asmflags", "bench", "benchtime", "blockprofile", "blockprofilerate",
	"buildmode", "compiler", "count", "covermode", "coverpkg", "coverprofile",
	"cpu", "cpuprofile", "exec", "fuzz", "fuzzminimizetime", "fuzztime",
	"gccgoflags", "gcflags", "installsuffix", "ldflags", "list", "memprofile",
	"memprofilerate", "mod", "modfile", "mutexprofile", "mutexprofilefraction",
	"o", "outputdir", "overlay", "p", "parallel", "pgo", "pkgdir", "run",
	"shuffle", "skip", "tags", "timeout", "toolexec", "trace", "vet",
}

// parseGoTest finds the package patterns of a `go test` command; ok is
// false for any other command.
func parseGoTest(args []string) (cmd goTestCommand, ok bool) {
	if len(args) < 2 || filepath.Base(args[0]) != "go" || args[1] != "test" {
		return goTestCommand{}, false
	}
	cmd = goTestCommand{args: args, argsAt: len(args)}
	for i := 2; i < len(args); i++ {
		a := args[i]
		if a == "-args" || a == "--args" {
			cmd.argsAt = i
			break
		}
		if !strings.HasPrefix(a, "-") {
			cmd.patterns = append(cmd.patterns, i)
			continue
		}
		name := strings.TrimPrefix(strings.TrimLeft(a, "-"), "test.")
		if !strings.Contains(name, "=") && slices.Contains(valueFlags, name) {
			i++ // its value
		}
	}
	return cmd, true
}

// packagePatterns are the command's package patterns; none means ".".
func (c goTestCommand) packagePatterns() []string {
	var ps []string
	for _, i := range c.patterns {
		ps = append(ps, c.args[i])
	}
	return ps
}

// withPackages is the command with pkgs in place of its patterns.
func (c goTestCommand) withPackages(pkgs []string) []string {
	var out []string
	for i, a := range c.args[:c.argsAt] {
		if !slices.Contains(c.patterns, i) {
			out = append(out, a)
		}
	}
	out = append(out, pkgs...)
	return append(out, c.args[c.argsAt:]...)
}

// planPackages counts the packages cmd tests, leaves out those that the
// patterns in except match, says so on w, and returns the count and the
// command to run. Without a count (go list failed) the run goes on; the
// lines just lack their total.
func planPackages(w io.Writer, tool goTool, cmd goTestCommand, except []string, every time.Duration) (int, []string, error) {
	patterns := cmd.packagePatterns()
	pkgs, err := listPackages(tool, patterns)
	if err != nil && len(except) == 0 {
		fmt.Fprintf(w, "testsummary: not counting the packages: %v\n", err)
		return 0, cmd.args, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("-except: %w", err)
	}
	args := cmd.args
	what := strings.Join(patterns, " ")
	if len(except) > 0 {
		left, err := listPackages(tool, except)
		if err != nil {
			return 0, nil, fmt.Errorf("-except: %w", err)
		}
		pkgs = slices.DeleteFunc(pkgs, func(p string) bool { return slices.Contains(left, p) })
		if len(pkgs) == 0 {
			return 0, nil, fmt.Errorf("-except %q leaves none of the packages of %q to test", strings.Join(except, " "), what)
		}
		args = cmd.withPackages(pkgs)
		what += " except " + strings.Join(except, " ")
	}
	if what == "" {
		what = "."
	}
	noun := "packages"
	if len(pkgs) == 1 {
		noun = "package"
	}
	fmt.Fprintf(w, "testsummary: %d %s to test (%s): a line for each as it ends", len(pkgs), noun, what)
	if every > 0 {
		fmt.Fprintf(w, ", and every %s the ones still running", every)
	}
	fmt.Fprintln(w)
	return len(pkgs), args, nil
}

// listPackages is the import paths the patterns match (go list).
func listPackages(tool goTool, patterns []string) ([]string, error) {
	out, err := tool.output(append([]string{"list", "-f", "{{.ImportPath}}"}, patterns...)...)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}
