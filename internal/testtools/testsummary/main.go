// Command testsummary runs `go test -json` and prints what a plain
// `go test` prints (a line per package, the output of failing tests),
// then every skipped test with the reason it gave, then one line of counts:
//
//	go run ./internal/testtools/testsummary go test -race -count=1 -json ./...
//	go run ./internal/testtools/testsummary -fetch -except ./internal/chaos/ go test -race -count=1 -json ./...
//	go test -json ./... | go run ./internal/testtools/testsummary
//
// A long run is never silent. With -fetch it first downloads the modules
// go.mod requires that the module cache lacks, a line per module as it
// arrives. Given a `go test` command, it counts the packages the command
// tests (go list) and prefixes each package's result line with how many
// have ended, "[12/40] ok  …"; and every -status interval (30s) it prints
// which packages are still running, for how long, and how many remain.
// -except PATTERNS leaves the packages they match out of the command's
// (the Makefile leaves the long suites to `make test-long` so). At the
// end it names the slowest packages and tests, the ones to move to such a
// target when the run grows long; -save FILE keeps the whole stream.
//
// A skip is easy to miss in a green run, and a check that silently stopped
// running is a check lost. So under CI=true, a skip whose reason starts
// with "needs TOOL:" for a tool that .ci/run installs (CITools) fails the
// run: there, such a skip means the installation broke.
//
// The exit status is 1 if a test or a build failed, if the command
// failed, or if CI=true met such a skip; the last line of output is always
// "N passed, N failed, N skipped".
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// CITools are the tools .ci/run installs. A test that cannot run without
// one of them skips with a reason starting "needs TOOL:"; under CI=true
// such a skip is a failure. Keep this list and .ci/run in step.
var CITools = []string{"chromium", "node", "duckdb", "postgresql", "podman", "make"}

// fetchParallel is how many `go mod download` run at once: the downloads
// wait on the network, not on the CPU.
const fetchParallel = 4

func main() {
	ci := os.Getenv("CI") == "true"
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, ci))
}

// run summarizes the output of the command in args (after testsummary's
// own flags), or of stdin when there is no command, and returns the exit
// status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, ci bool) int {
	fail := func(code int, err error) int {
		if err != nil {
			fmt.Fprintf(stderr, "testsummary: %v\n", err)
		}
		fmt.Fprintf(stdout, "%d passed, %d failed, %d skipped\n", 0, 0, 0)
		return code
	}
	opts, err := parseOptions(args, stderr)
	if err != nil {
		return fail(2, nil) // the flag package has said what was wrong
	}
	command, total, err := prepare(stdout, opts)
	if err != nil {
		return fail(1, err)
	}
	var saved io.Writer = io.Discard
	if opts.save != "" {
		f, err := createSave(opts.save)
		if err != nil {
			return fail(1, err)
		}
		defer f.Close()
		saved = f
	}
	in := stdin
	var cmd *exec.Cmd
	if len(command) > 0 {
		cmd = exec.Command(command[0], command[1:]...)
		cmd.Stdin, cmd.Stderr = stdin, stderr
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return fail(1, err)
		}
		if err := cmd.Start(); err != nil {
			return fail(1, err)
		}
		in = pipe
	}
	s := newSummary(stdout, ci, total, time.Now())
	var ticks <-chan time.Time
	if opts.every > 0 {
		ticker := time.NewTicker(opts.every)
		defer ticker.Stop()
		ticks = ticker.C
	}
	readErr := s.follow(io.TeeReader(in, saved), ticks, time.Now)
	failed := s.finish()
	if readErr != nil {
		fmt.Fprintf(stderr, "testsummary: reading test output: %v\n", readErr)
		failed = true
	}
	if cmd != nil {
		if err := cmd.Wait(); err != nil {
			// go test exits 1 when a test failed, which the counts say
			// already; any failure it did not report as an event (a bad
			// flag, a package that does not exist) still fails the run.
			failed = true
		}
	}
	s.printCounts()
	if failed {
		return 1
	}
	return 0
}

// options are testsummary's flags and the command after them.
type options struct {
	fetch   bool
	except  []string
	save    string
	every   time.Duration
	command []string
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	flags := flag.NewFlagSet("testsummary", flag.ContinueOnError)
	flags.SetOutput(stderr)
	var opts options
	var except string
	flags.BoolVar(&opts.fetch, "fetch", false, "first download the modules go.mod requires that the module cache lacks, a line per module")
	flags.StringVar(&except, "except", "", "space-separated package patterns to leave out of the go test command's packages")
	flags.StringVar(&opts.save, "save", "", "also write the command's output, the go test -json stream, to this file")
	flags.DurationVar(&opts.every, "status", 30*time.Second, "how often to print the packages still running (0: never)")
	if err := flags.Parse(args); err != nil {
		return options{}, err
	}
	if opts.every < 0 {
		err := fmt.Errorf("invalid value %q for flag -status: negative; want an interval, or 0 for no status lines", opts.every)
		fmt.Fprintln(stderr, err)
		return options{}, err
	}
	opts.except, opts.command = strings.Fields(except), flags.Args()
	return opts, nil
}

// prepare fetches the modules if asked, and counts the packages of a go
// test command, leaving out those -except names. It returns the command
// to run and how many packages it tests (0: not known).
func prepare(w io.Writer, opts options) ([]string, int, error) {
	var tool goTool
	if opts.fetch {
		if err := fetchModules(w, tool, fetchParallel, time.Now); err != nil {
			return nil, 0, err
		}
	}
	cmd, ok := parseGoTest(opts.command)
	if !ok {
		if len(opts.except) > 0 {
			return nil, 0, errors.New("-except needs a go test command to take packages from")
		}
		return opts.command, 0, nil
	}
	total, command, err := planPackages(w, tool, cmd, opts.except, opts.every)
	return command, total, err
}

// createSave creates the file -save names, and its directory.
func createSave(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("-save: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-save: %w", err)
	}
	return f, nil
}
