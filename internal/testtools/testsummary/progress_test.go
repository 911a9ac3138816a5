package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// replay feeds a recorded stream to s as it arrived: each line at the time
// its event carries (a line without one, at the time of the line before),
// with a status line every interval from begin, as the ticker of a live
// run gives them.
func replay(t *testing.T, s *summary, stream []byte, begin time.Time, every time.Duration) {
	t.Helper()
	now, next := begin, begin.Add(every)
	for _, line := range bytes.Split(bytes.TrimSuffix(stream, []byte("\n")), []byte("\n")) {
		var e struct{ Time time.Time }
		if json.Unmarshal(line, &e) == nil && !e.Time.IsZero() {
			now = e.Time
		}
		for !next.After(now) {
			s.status(s.w, next)
			next = next.Add(every)
		}
		s.line(line, now)
	}
}

// testdata/progress.jsonl is `go test -p 2 -count=1 -json ./...` of a
// module of five packages, recorded with an empty build cache: broken
// does not build, fast passes with a skip, mid fails after 12 s, none has
// no test files, slow passes after 25 s. The go command started at
// recordedBegin and built for 38 s before the first package started.
// Replayed with a status line every 10 s, the output shows the build, the
// two packages running side by side, each result line with its count, and
// at the end the skips and the counts.
func TestProgressGolden(t *testing.T) {
	t.Parallel()
	recordedBegin := time.Date(2026, 11, 29, 4, 0, 35, 845361626, time.UTC)
	stream, err := os.ReadFile(filepath.Join("testdata", "progress.jsonl"))
	require.NoError(t, err)
	stream = bytes.ReplaceAll(stream, []byte("example.com/ts"), []byte("github.com/ctdispatch/ctdispatch"))
	var out bytes.Buffer
	s := newSummary(&out, false, 5, recordedBegin)
	replay(t, s, stream, recordedBegin, 10*time.Second)
	require.True(t, s.finish(), "a failed test and a failed build fail the run")
	s.printCounts()
	golden(t, "progress.golden", out.String())
}

func TestStatus(t *testing.T) {
	t.Parallel()
	begin := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return begin.Add(d) }
	const mod = "github.com/ctdispatch/ctdispatch/"
	tests := []struct {
		name    string
		total   int
		done    int
		running map[string]time.Time
		now     time.Time
		want    string
	}{
		{
			name: "building before any test binary starts", total: 40, now: at(30 * time.Second),
			want: "still running at 30s: no test binary running yet, building; 0 of 40 packages done, 40 remaining\n",
		},
		{
			name: "longest running first, rounded to the second", total: 40, done: 12, now: at(150*time.Second + 400*time.Millisecond),
			running: map[string]time.Time{mod + "internal/cli": at(105 * time.Second), mod + "internal/chaos": at(20 * time.Second)},
			want:    "still running at 2m30s: ./internal/chaos (2m10s), ./internal/cli (45s); 12 of 40 packages done, 28 remaining\n",
		},
		{
			name: "two that started together in name order", total: 3, done: 1, now: at(time.Minute),
			running: map[string]time.Time{mod + "b": at(0), mod + "a": at(0)},
			want:    "still running at 1m0s: ./a (1m0s), ./b (1m0s); 1 of 3 packages done, 2 remaining\n",
		},
		{
			name: "without a total, only what is done", done: 4, now: at(time.Hour),
			running: map[string]time.Time{"example.com/x": at(59 * time.Minute)},
			want:    "still running at 1h0m0s: example.com/x (1m0s); 4 packages done\n",
		},
		{
			name: "nothing once every package has ended", total: 2, done: 2, now: at(time.Minute),
			want: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newProgress(tt.total, begin)
			p.done = tt.done
			for pkg, started := range tt.running {
				p.started(pkg, started)
			}
			var out bytes.Buffer
			p.status(&out, tt.now)
			require.Equal(t, tt.want, out.String())
		})
	}
}

func TestCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		total, done int
		want        string
	}{
		{total: 40, done: 3, want: "[ 3/40]"},
		{total: 40, done: 40, want: "[40/40]"},
		{total: 5, done: 1, want: "[1/5]"},
		{total: 0, done: 7, want: "[7]"},
	}
	for _, tt := range tests {
		p := newProgress(tt.total, time.Time{})
		p.done = tt.done
		require.Equal(t, tt.want, p.count())
	}
}

func TestIsResultLine(t *testing.T) {
	t.Parallel()
	const pkg = "example.com/ts/a"
	tests := map[string]bool{
		"ok  \texample.com/ts/a\t0.002s\n":          true,
		"ok  \texample.com/ts/a\t(cached)\n":        true,
		"FAIL\texample.com/ts/a\t1.5s\n":            true,
		"FAIL\texample.com/ts/a [build failed]\n":   true,
		"?   \texample.com/ts/a\t[no test files]\n": true,
		"FAIL\n":                          false,
		"PASS\n":                          false,
		"ok  \texample.com/ts/ab\t0.1s\n": false,
		"coverage: 80% of statements\n":   false,
		"    x_test.go:3: ok  \texample.com/ts/a\t0.002s\n": false,
	}
	for output, want := range tests {
		require.Equal(t, want, isResultLine(event{Package: pkg, Output: output}), "%q", output)
	}
}

// A stream cut short (the command was killed) names the packages that
// started and never ended, and fails the run though nothing failed.
func TestUnendedPackagesFail(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	s := newSummary(&out, false, 2, time.Time{})
	s.line([]byte(`{"Action":"start","Package":"example.com/ts/b"}`), time.Time{})
	s.line([]byte(`{"Action":"start","Package":"example.com/ts/a"}`), time.Time{})
	s.line([]byte(`{"Action":"skip","Package":"example.com/ts/a"}`), time.Time{})
	require.True(t, s.finish())
	s.printCounts()
	require.Equal(t, "[1/2] skip\texample.com/ts/a\n"+
		"no result from packages that had started: example.com/ts/b\n"+
		"0 passed, 0 failed, 0 skipped\n", out.String())
}

func TestSlowest(t *testing.T) {
	t.Parallel()
	const mod = "github.com/ctdispatch/ctdispatch/"
	end := func(pkg, test string, seconds float64) event {
		return event{Action: "pass", Package: mod + pkg, Test: test, Elapsed: seconds}
	}
	tests := []struct {
		name   string
		events []event
		want   string
	}{
		{
			name: "five of each, longest first; subtests are their parent's",
			events: []event{
				end("a", "", 10), end("b", "", 525.77), end("c", "", 3), end("d", "", 40), end("e", "", 1), end("f", "", 2),
				end("b", "TestSuite", 220.65), end("b", "TestSuite/herd", 300), end("a", "TestX", 9.96), end("b", "TestBusy", 203.2),
				end("c", "TestY", 1), end("c", "TestZ", 1), end("d", "TestW", 0.5), end("e", "TestTiny", 0.04),
			},
			want: "\nslowest packages: ./b 525.8s, ./d 40.0s, ./a 10.0s, ./c 3.0s, ./f 2.0s\n" +
				"slowest tests: ./b TestSuite 220.7s, ./b TestBusy 203.2s, ./a TestX 10.0s, ./c TestY 1.0s, ./c TestZ 1.0s\n",
		},
		{
			name:   "one package: its tests only",
			events: []event{end("a", "", 3), end("a", "TestX", 2.5)},
			want:   "\nslowest tests: ./a TestX 2.5s\n",
		},
		{
			name:   "no times (a stream without them), or under 0.05s: nothing",
			events: []event{end("a", "", 0), end("b", "", 0.049), end("a", "TestX", 0)},
			want:   "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newProgress(0, time.Time{})
			for _, e := range tt.events {
				p.took(e)
			}
			var out bytes.Buffer
			p.slowest(&out)
			require.Equal(t, tt.want, out.String())
		})
	}
}
