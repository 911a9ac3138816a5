package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/bench"
)

// tiny keeps the in-process runs short: 8 calls per mode in 2 rounds.
var tiny = []string{"bench", "--count", "8", "--rounds", "2", "--concurrency", "2"}

func benchArgs(extra ...string) []string { return append(append([]string(nil), tiny...), extra...) }

func TestBenchTable(t *testing.T) {
	t.Parallel()
	res := run(t, nil, benchArgs("--duplicate-ratio", "0.25", "--payload-size", "0")...)
	require.Equal(t, 0, res.code, res.stderr)
	progress := strings.Split(strings.TrimSuffix(res.stderr, "\n"), "\n")
	require.Len(t, progress, 2*9, "one progress line per round and mode")
	for _, line := range progress {
		require.Regexp(t, `^round [12]/2  [a-z-]+ +4 ops +0 errors +\d+ ops/s$`, line)
	}
	lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
	require.Len(t, lines, 2+9)
	require.Equal(t, fmt.Sprintf("8 calls per mode in 2 rounds, 2 concurrent callers, payload 0 B, duplicate ratio 0.25, fault rate 0, commit-then-fail rate 0, emulator latency 0s, batch-bare size 2, batch in flight 4, emulator in-process, GOMAXPROCS %d",
		runtime.GOMAXPROCS(0)), lines[0])
	require.Equal(t, []string{"mode", "ops", "errors", "ops/s", "p50", "p99", "allocs/op", "cpu", "s/1k", "vs", "create-bare", "vs", "batch-bare"}, strings.Fields(lines[1]))
	var modes []string
	for _, line := range lines[2:] {
		cells := strings.Fields(line)
		require.Len(t, cells, 10, line)
		modes = append(modes, cells[0])
		require.Equal(t, "8", cells[1], line)
		require.Equal(t, "0", cells[2], line)
		require.True(t, strings.HasSuffix(cells[8], "x"), line)
		if cells[0] == "dispatch-batched" {
			require.True(t, strings.HasSuffix(cells[9], "x"), line)
		} else {
			require.Equal(t, "-", cells[9], line)
		}
	}
	require.Equal(t, []string{"create-bare", "batch-bare", "dispatch", "dispatch-strict", "dispatch-batched", "interval", "memory", "timer", "naming"}, modes)
	require.Equal(t, "1.00x", strings.Fields(lines[2])[8])
}

func TestBenchJSON(t *testing.T) {
	t.Parallel()
	res := run(t, nil, benchArgs("--mode", "naming,create-bare", "--json")...)
	require.Equal(t, 0, res.code, res.stderr)
	var got struct {
		Emulator string `json:"emulator"`
		Config   struct {
			Modes []string `json:"modes"`
			Count int      `json:"count"`
		} `json:"config"`
		Results []struct {
			Mode  string   `json:"mode"`
			Ops   int      `json:"ops"`
			Ratio *float64 `json:"ratio_vs_bare"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
	require.Equal(t, "in-process", got.Emulator)
	require.Equal(t, []string{"create-bare", "naming"}, got.Config.Modes)
	require.Equal(t, 8, got.Config.Count)
	require.Len(t, got.Results, 2)
	require.Equal(t, "create-bare", got.Results[0].Mode)
	require.Equal(t, "naming", got.Results[1].Mode)
	require.Equal(t, 8, got.Results[1].Ops)
	require.Equal(t, 1.0, *got.Results[0].Ratio)
	require.NotNil(t, got.Results[1].Ratio)
}

func TestBenchForDuration(t *testing.T) {
	t.Parallel()
	res := run(t, nil, "bench", "--mode", "naming", "--duration", "50ms", "--rounds", "1", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var got struct {
		Config struct {
			Count           int     `json:"count"`
			DurationSeconds float64 `json:"duration_seconds"`
		} `json:"config"`
		Results []struct {
			Ops int `json:"ops"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
	require.Zero(t, got.Config.Count)
	require.Equal(t, 0.05, got.Config.DurationSeconds)
	require.Len(t, got.Results, 1)
	require.Positive(t, got.Results[0].Ops)
}

func TestBenchCPUProfile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cpu.prof")
	res := run(t, nil, benchArgs("--mode", "naming", "--cpuprofile", path)...)
	require.Equal(t, 0, res.code, res.stderr)
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Positive(t, info.Size())

	res = run(t, nil, benchArgs("--mode", "naming", "--cpuprofile", filepath.Join(t.TempDir(), "missing", "cpu.prof"))...)
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "ctdispatch: --cpuprofile: open ")
}

func TestBenchWithoutBaselineHasNoRatio(t *testing.T) {
	t.Parallel()
	res := run(t, nil, benchArgs("--mode", "naming")...)
	require.Equal(t, 0, res.code, res.stderr)
	lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
	require.Len(t, lines, 3)
	require.Equal(t, []string{"-", "-"}, strings.Fields(lines[2])[8:])
}

func TestBenchExternalEmulator(t *testing.T) {
	t.Parallel()
	emu := startCLIEmulator(t)
	res := run(t, nil, benchArgs("--mode", "create-bare,memory", "--emulator", emu.Addr())...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "emulator "+emu.Addr()+",")
	require.Len(t, emu.Tasks(bench.Queue), 16)
}

// --emulator-process runs the emulator in a child process of the built
// binary, and the report says so: its CPU figures are the client's alone.
func TestBinaryBenchEmulatorProcess(t *testing.T) {
	t.Parallel()
	res := runBinary(t, nil, "", benchArgs("--mode", "create-bare,memory", "--emulator-process", "--json")...)
	require.Equal(t, 0, res.code, res.stderr)
	var got struct {
		Emulator string `json:"emulator"`
		Results  []struct {
			Mode string `json:"mode"`
			Ops  int    `json:"ops"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &got), res.stdout)
	require.Regexp(t, `^child process at 127\.0\.0\.1:[0-9]+$`, got.Emulator)
	require.Len(t, got.Results, 2)
	for _, r := range got.Results {
		require.Equal(t, 8, r.Ops, r.Mode)
	}
}

func TestBenchUnreachableEmulator(t *testing.T) {
	t.Parallel()
	res := run(t, nil, benchArgs("--mode", "create-bare", "--emulator", "127.0.0.1:1")...)
	require.Equal(t, 1, res.code)
	require.Empty(t, res.stdout)
	require.True(t, strings.HasPrefix(res.stderr, "ctdispatch: bench: create queue "+bench.Queue+": "), res.stderr)
	require.Contains(t, res.stderr, "Unavailable")
}

func TestBenchInvalidFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"zero concurrency", benchArgs("--concurrency", "0"), "--concurrency 0 must be at least 1"},
		{"concurrency not a number", []string{"bench", "--concurrency", "many"}, `invalid argument "many" for "--concurrency" flag: strconv.ParseInt: parsing "many": invalid syntax`},
		{"zero count", []string{"bench", "--count", "0"}, "--count 0 must be at least 1"},
		{"negative count", []string{"bench", "--count", "-3"}, "--count -3 must not be negative"},
		{"zero duration", []string{"bench", "--duration", "0s"}, "--duration 0s must be positive"},
		{"negative duration", []string{"bench", "--duration", "-2s"}, "--duration -2s must not be negative"},
		{"count and duration", []string{"bench", "--count", "100", "--duration", "1s"}, "--count 100 and --duration exclude each other; give one"},
		{"fewer calls than rounds", []string{"bench", "--count", "3", "--rounds", "4"}, "--count 3 is below --rounds (4); every round needs a call"},
		{"zero rounds", []string{"bench", "--rounds", "0"}, "--rounds 0 must be at least 1"},
		{"zero batch in flight", []string{"bench", "--batch-in-flight", "0"}, "--batch-in-flight 0 must be at least 1"},
		{"negative batch in flight", []string{"bench", "--batch-in-flight", "-2"}, "--batch-in-flight -2 must be at least 1"},
		{"unknown mode", []string{"bench", "--mode", "create-bare,fast"}, "--mode fast is not a mode; allowed: all, create-bare, batch-bare, dispatch, dispatch-strict, dispatch-batched, interval, memory, timer, naming"},
		{"negative payload", []string{"bench", "--payload-size", "-1"}, "--payload-size -1 must not be negative"},
		{"payload too large", []string{"bench", "--payload-size", "2000000"}, "--payload-size 2000000 exceeds 1000000 bytes (Cloud Tasks allows 1 MiB per task)"},
		{"duplicate ratio 1", []string{"bench", "--duplicate-ratio", "1"}, "--duplicate-ratio 1 must be in [0, 1)"},
		{"fault rate above 1", []string{"bench", "--fault-rate", "1.5"}, "--fault-rate 1.5 must be in [0, 1]"},
		{"negative commit-then-fail rate", []string{"bench", "--commit-then-fail-rate", "-0.1"}, "--commit-then-fail-rate -0.1 must be in [0, 1]"},
		{"faults on an external emulator", []string{"bench", "--emulator", "127.0.0.1:8123", "--fault-rate", "0.1"}, "--fault-rate 0.1 needs the in-process emulator; configure faults on the emulator at 127.0.0.1:8123 instead"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, nil, tt.args...)
			require.Equal(t, 2, res.code, res.stderr)
			require.Empty(t, res.stdout)
			require.Equal(t, "ctdispatch: "+tt.wantStderr+"\n", res.stderr)
		})
	}
}
