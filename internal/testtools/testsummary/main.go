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
// (the Makefile leaves the long suites to `make test-long` so).
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
	flags := flag.NewFlagSet("testsummary", flag.ContinueOnError)
	flags.SetOutput(stderr)
	fetch := flags.Bool("fetch", false, "first download the modules go.mod requires that the module cache lacks, a line per module")
	except := flags.String("except", "", "space-separated package patterns to leave out of the go test command's packages")
	every := flags.Duration("status", 30*time.Second, "how often to print the packages still running (0: never)")
	if err := flags.Parse(args); err != nil {
		fmt.Fprintf(stdout, "%d passed, %d failed, %d skipped\n", 0, 0, 0)
		return 2
	}
	args = flags.Args()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "testsummary: %v\n", err)
		fmt.Fprintf(stdout, "%d passed, %d failed, %d skipped\n", 0, 0, 0)
		return 1
	}
	if *every < 0 {
		return fail(fmt.Errorf("-status %v is negative; want an interval, or 0 for no status lines", *every))
	}
	var tool goTool
	if *fetch {
		if err := fetchModules(stdout, tool, fetchParallel, time.Now); err != nil {
			return fail(err)
		}
	}
	total := 0
	if cmd, ok := parseGoTest(args); ok {
		n, rewritten, err := planPackages(stdout, tool, cmd, strings.Fields(*except), *every)
		if err != nil {
			return fail(err)
		}
		total, args = n, rewritten
	} else if *except != "" {
		return fail(errors.New("-except needs a go test command to take packages from"))
	}

	in := stdin
	var cmd *exec.Cmd
	if len(args) > 0 {
		cmd = exec.Command(args[0], args[1:]...)
		cmd.Stdin, cmd.Stderr = stdin, stderr
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return fail(err)
		}
		if err := cmd.Start(); err != nil {
			return fail(err)
		}
		in = pipe
	}
	s := newSummary(stdout, ci, total, time.Now())
	var ticks <-chan time.Time
	if *every > 0 {
		ticker := time.NewTicker(*every)
		defer ticker.Stop()
		ticks = ticker.C
	}
	readErr := s.follow(in, ticks, time.Now)
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
