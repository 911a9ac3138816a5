package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// progress follows which packages have started and ended, so that a long
// run says how far it has got: each package's result line carries how
// many packages have ended, and a status line names those still running.
type progress struct {
	total   int                  // packages the command tests; 0 when not known
	done    int                  // packages that have ended
	begin   time.Time            // when the run began
	running map[string]time.Time // package → when its test binary started
	result  map[string]string    // package → its result line, held until it ends
	timings []timing             // of the packages and top-level tests that ended
}

// timing is how long a package (test "") or a top-level test took.
type timing struct {
	pkg, test string
	seconds   float64
}

// slowestShown is how many packages and tests the slowest lines name.
const slowestShown = 5

func newProgress(total int, begin time.Time) progress {
	return progress{total: total, begin: begin, running: map[string]time.Time{}, result: map[string]string{}}
}

// isResultLine reports whether e is the line go test ends a package with:
// "ok  \tpkg\t1.2s", "FAIL\tpkg\t1.2s", "FAIL\tpkg [build failed]",
// "?   \tpkg\t[no test files]".
func isResultLine(e event) bool {
	for _, status := range []string{"ok  \t", "FAIL\t", "?   \t"} {
		if rest, ok := strings.CutPrefix(e.Output, status+e.Package); ok && rest != "" && strings.ContainsRune("\t \n", rune(rest[0])) {
			return true
		}
	}
	return false
}

// started records that pkg's test binary started at now.
func (p *progress) started(pkg string, now time.Time) {
	p.running[pkg] = now
}

// ended prints pkg's result line after the count of packages ended so
// far. A stream cut short may lack the line: the action stands in for it.
func (p *progress) ended(w io.Writer, pkg, action string) {
	p.done++
	delete(p.running, pkg)
	line, ok := p.result[pkg]
	if !ok {
		line = fmt.Sprintf("%s\t%s\n", action, pkg)
	}
	delete(p.result, pkg)
	fmt.Fprintf(w, "%s %s", p.count(), line)
}

// count is "[ 7/40]", or "[7]" when the total is not known.
func (p *progress) count() string {
	if p.total == 0 {
		return fmt.Sprintf("[%d]", p.done)
	}
	width := len(fmt.Sprint(p.total))
	return fmt.Sprintf("[%*d/%d]", width, p.done, p.total)
}

// status prints which packages are running at now, longest first, and
// how many remain. Before a test binary starts (or between two) the go
// command is building; it says so rather than nothing.
func (p *progress) status(w io.Writer, now time.Time) {
	if p.total > 0 && p.done >= p.total {
		return
	}
	pkgs := make([]string, 0, len(p.running))
	for pkg := range p.running {
		pkgs = append(pkgs, pkg)
	}
	slices.SortFunc(pkgs, func(a, b string) int {
		if c := p.running[a].Compare(p.running[b]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var running []string
	for _, pkg := range pkgs {
		running = append(running, fmt.Sprintf("%s (%s)", shortPackage(pkg), seconds(now.Sub(p.running[pkg]))))
	}
	what := "no test binary running yet, building"
	if len(running) > 0 {
		what = strings.Join(running, ", ")
	}
	left := fmt.Sprintf("%d packages done", p.done)
	if p.total > 0 {
		left = fmt.Sprintf("%d of %d packages done, %d remaining", p.done, p.total, p.total-p.done)
	}
	fmt.Fprintf(w, "still running at %s: %s; %s\n", seconds(now.Sub(p.begin)), what, left)
}

// unended names the packages that started and never ended (the command
// was killed), or "" when there are none.
func (p *progress) unended() string {
	var pkgs []string
	for pkg := range p.running {
		pkgs = append(pkgs, shortPackage(pkg))
	}
	slices.Sort(pkgs)
	return strings.Join(pkgs, ", ")
}

// took records how long the package or top-level test of an end event
// took; subtests are part of their parent's time, and what rounds to
// 0.0s is not worth naming.
func (p *progress) took(e event) {
	if e.Elapsed >= 0.05 && !strings.Contains(e.Test, "/") {
		p.timings = append(p.timings, timing{e.Package, e.Test, e.Elapsed})
	}
}

// slowest prints the packages and the tests that took longest, which are
// the ones to move to a separate target when the run grows too long.
func (p *progress) slowest(w io.Writer) {
	slices.SortStableFunc(p.timings, func(a, b timing) int {
		if a.seconds != b.seconds {
			return cmp.Compare(b.seconds, a.seconds)
		}
		return cmp.Or(strings.Compare(a.pkg, b.pkg), strings.Compare(a.test, b.test))
	})
	var pkgs, tests []string
	for _, t := range p.timings {
		name := shortPackage(t.pkg)
		if t.test != "" {
			name += " " + t.test
		}
		entry := fmt.Sprintf("%s %.1fs", name, t.seconds)
		if t.test == "" && len(pkgs) < slowestShown {
			pkgs = append(pkgs, entry)
		} else if t.test != "" && len(tests) < slowestShown {
			tests = append(tests, entry)
		}
	}
	if len(pkgs) > 1 || len(tests) > 0 {
		fmt.Fprintln(w)
	}
	if len(pkgs) > 1 {
		fmt.Fprintf(w, "slowest packages: %s\n", strings.Join(pkgs, ", "))
	}
	if len(tests) > 0 {
		fmt.Fprintf(w, "slowest tests: %s\n", strings.Join(tests, ", "))
	}
}

// seconds rounds d to the second: a status line has no use for less.
func seconds(d time.Duration) time.Duration {
	return d.Round(time.Second)
}
