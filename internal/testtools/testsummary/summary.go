package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on a test's or a package's end
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
	progress
}

// newSummary starts the summary of a run that began at begin and tests
// total packages (0: not known).
func newSummary(w io.Writer, ci bool, total int, begin time.Time) *summary {
	return &summary{w: w, ci: ci, out: map[testKey][]string{}, progress: newProgress(total, begin)}
}

// follow reads the command's output to its end. Between lines, each value
// from ticks prints the packages still running; now tells the time of
// each line and tick.
func (s *summary) follow(r io.Reader, ticks <-chan time.Time, now func() time.Time) error {
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 16<<20)
		for sc.Scan() {
			lines <- slices.Clone(sc.Bytes())
		}
		readErr <- sc.Err()
		close(lines)
	}()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return <-readErr
			}
			s.line(line, now())
		case <-ticks:
			s.status(s.w, now())
		}
	}
}

// line handles one line of output, read at now.
func (s *summary) line(line []byte, now time.Time) {
	var e event
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
		// Not an event (the go command's own messages): pass it on.
		fmt.Fprintf(s.w, "%s\n", line)
		return
	}
	s.handle(e, now)
}

func (s *summary) handle(e event, now time.Time) {
	k := testKey{e.Package, e.Test}
	switch {
	case e.Action == "build-output":
		fmt.Fprint(s.w, e.Output)
	case e.Action == "build-fail":
		s.buildFailed = true
	case e.Test == "":
		s.packageEvent(e, now)
	case e.Action == "output":
		s.out[k] = append(s.out[k], e.Output)
	case e.Action == "pass":
		s.passed++
		s.took(e)
		delete(s.out, k)
	case e.Action == "fail":
		s.failed++
		s.took(e)
		s.printTestOutput(k)
	case e.Action == "skip":
		s.skips = append(s.skips, skip{e.Package, e.Test, skipReason(s.out[k])})
		delete(s.out, k)
	}
}

// packageEvent prints a package's own lines as plain go test does, its
// result line ("ok  \tpkg\t1.2s") last, when the package ends, after how
// many packages have ended.
func (s *summary) packageEvent(e event, now time.Time) {
	switch e.Action {
	case "start":
		s.started(e.Package, now)
	case "output":
		if isResultLine(e) {
			s.result[e.Package] = e.Output
		} else if e.Output != "PASS\n" {
			fmt.Fprint(s.w, e.Output)
		}
	case "pass", "skip":
		s.took(e)
		s.ended(s.w, e.Package, e.Action)
	case "fail":
		s.pkgFailed = true
		// A test that never ended (a panic, a timeout) left its output
		// here: it tells why the package failed.
		for k := range s.out {
			if k.pkg == e.Package {
				s.printTestOutput(k)
			}
		}
		s.took(e)
		s.ended(s.w, e.Package, e.Action)
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
	unended := s.unended()
	if unended != "" {
		fmt.Fprintf(s.w, "no result from packages that had started: %s\n", unended)
	}
	s.slowest(s.w)
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
	return s.failed > 0 || s.pkgFailed || s.buildFailed || ciFailed || unended != ""
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
