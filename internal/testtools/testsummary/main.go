// Command testsummary runs `go test -json` and prints what a plain
// `go test` prints (a line per package, the output of failing tests),
// then every skipped test with the reason it gave, then one line of counts:
//
//	go run ./internal/testtools/testsummary go test -race -count=1 -json ./...
//	go test -json ./... | go run ./internal/testtools/testsummary
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
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

// CITools are the tools .ci/run installs. A test that cannot run without
// one of them skips with a reason starting "needs TOOL:"; under CI=true
// such a skip is a failure. Keep this list and .ci/run in step.
var CITools = []string{"chromium", "node", "duckdb", "postgresql", "podman", "make"}

func main() {
	ci := os.Getenv("CI") == "true"
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, ci))
}

// run summarizes the output of the command in args, or of stdin when args
// is empty, and returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, ci bool) int {
	in := stdin
	var cmd *exec.Cmd
	if len(args) > 0 {
		cmd = exec.Command(args[0], args[1:]...)
		cmd.Stdin, cmd.Stderr = stdin, stderr
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			fmt.Fprintf(stderr, "testsummary: %v\n", err)
			return 1
		}
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(stderr, "testsummary: %v\n", err)
			return 1
		}
		in = pipe
	}
	s := newSummary(stdout, ci)
	readErr := s.read(in)
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

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// skip is a skipped test and the reason it gave.
type skip struct {
	Package, Test, Reason string
}

type testKey struct{ pkg, test string }

// summary follows the events of one run.
type summary struct {
	w                      io.Writer
	ci                     bool
	out                    map[testKey][]string // output of tests still running
	passed, failed         int
	skips                  []skip
	pkgFailed, buildFailed bool
}

func newSummary(w io.Writer, ci bool) *summary {
	return &summary{w: w, ci: ci, out: map[testKey][]string{}}
}

func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Not an event (the go command's own messages): pass it on.
			fmt.Fprintf(s.w, "%s\n", line)
			continue
		}
		s.handle(e)
	}
	return sc.Err()
}

func (s *summary) handle(e event) {
	k := testKey{e.Package, e.Test}
	switch {
	case e.Action == "build-output":
		fmt.Fprint(s.w, e.Output)
	case e.Action == "build-fail":
		s.buildFailed = true
	case e.Test == "":
		s.packageEvent(e)
	case e.Action == "output":
		s.out[k] = append(s.out[k], e.Output)
	case e.Action == "pass":
		s.passed++
		delete(s.out, k)
	case e.Action == "fail":
		s.failed++
		s.printTestOutput(k)
	case e.Action == "skip":
		s.skips = append(s.skips, skip{e.Package, e.Test, skipReason(s.out[k])})
		delete(s.out, k)
	}
}

// packageEvent prints a package's own lines as plain go test does.
func (s *summary) packageEvent(e event) {
	switch e.Action {
	case "output":
		if e.Output != "PASS\n" {
			fmt.Fprint(s.w, e.Output)
		}
	case "fail":
		s.pkgFailed = true
		// A test that never ended (a panic, a timeout) left its output
		// here: it tells why the package failed.
		for k := range s.out {
			if k.pkg == e.Package {
				s.printTestOutput(k)
			}
		}
	}
}

// printTestOutput prints a test's output as plain go test does: its
// "--- FAIL" line first, then what it logged, without the "=== RUN" lines.
func (s *summary) printTestOutput(k testKey) {
	lines := s.out[k]
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "--- ") {
			fmt.Fprint(s.w, l)
		}
	}
	for _, l := range lines {
		if t := strings.TrimSpace(l); !strings.HasPrefix(t, "--- ") && !strings.HasPrefix(t, "=== ") {
			fmt.Fprint(s.w, l)
		}
	}
	delete(s.out, k)
}

// logLine matches the start of a t.Log line: "    file_test.go:42: text".
var logLine = regexp.MustCompile(`^\s*[^\s:]+\.go:\d+: ?(.*)$`)

// skipReason returns what the test logged last before it skipped: the
// message of t.Skip, with its continuation lines.
func skipReason(lines []string) string {
	var last []string
	for _, l := range lines {
		l = strings.TrimRight(l, "\n")
		t := strings.TrimSpace(l)
		switch {
		case t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP"):
		case logLine.MatchString(l):
			last = []string{logLine.FindStringSubmatch(l)[1]}
		case last != nil:
			last = append(last, t)
		}
	}
	if len(last) == 0 {
		return "(no reason given)"
	}
	return strings.Join(last, " ")
}

// missingCITool returns the CI tool a skip reason says is missing, if any.
func missingCITool(reason string) (string, bool) {
	rest, ok := strings.CutPrefix(reason, "needs ")
	if !ok {
		return "", false
	}
	tool, _, ok := strings.Cut(rest, ":")
	if !ok || !slices.Contains(CITools, tool) {
		return "", false
	}
	return tool, true
}

// finish prints the skips and reports whether the run failed.
func (s *summary) finish() bool {
	// Tests left running when the output ended (the command was killed).
	for k := range s.out {
		s.printTestOutput(k)
	}
	var missing []skip
	if len(s.skips) > 0 {
		fmt.Fprintf(s.w, "\nskipped (%d):\n", len(s.skips))
		for _, sk := range s.skips {
			fmt.Fprintf(s.w, "  %s %s: %s\n", shortPackage(sk.Package), sk.Test, sk.Reason)
			if _, ok := missingCITool(sk.Reason); ok {
				missing = append(missing, sk)
			}
		}
	}
	ciFailed := s.ci && len(missing) > 0
	if ciFailed {
		fmt.Fprintf(s.w, "\nFAIL: CI=true, and %d tests skipped for want of a tool that .ci/run installs (%s):\n",
			len(missing), strings.Join(CITools, ", "))
		for _, sk := range missing {
			fmt.Fprintf(s.w, "  %s %s: %s\n", shortPackage(sk.Package), sk.Test, sk.Reason)
		}
	}
	return s.failed > 0 || s.pkgFailed || s.buildFailed || ciFailed
}

func (s *summary) printCounts() {
	fmt.Fprintf(s.w, "%d passed, %d failed, %d skipped\n", s.passed, s.failed, len(s.skips))
}

// shortPackage drops the module path, which every package shares.
func shortPackage(pkg string) string {
	const module = "github.com/ctdispatch/ctdispatch"
	if pkg == module {
		return "."
	}
	if rest, ok := strings.CutPrefix(pkg, module+"/"); ok {
		return "./" + rest
	}
	return pkg
}
