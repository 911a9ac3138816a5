package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// wantDuplicates counts the calls keyOf marks as repeats over rounds of n.
func wantDuplicates(seed uint64, ratio float64, n, rounds int) int64 {
	var dups int64
	for i := 1; i <= n; i++ {
		if _, dup := keyOf(seed, ratio, uint64(i)); dup {
			dups++
		}
	}
	return dups * int64(rounds)
}

func TestRunEveryMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rep, err := Run(context.Background(), Config{Count: 120, Rounds: 3, Concurrency: 4, DuplicateRatio: 0.25, PayloadSize: 64, OutboxDir: dir}, nil)
	require.NoError(t, err)
	require.Equal(t, "in-process", rep.Emulator)
	var modes []Mode
	dups := wantDuplicates(1, 0.25, 40, 3)
	require.NotZero(t, dups)
	for _, r := range rep.Results {
		modes = append(modes, r.Mode)
		require.Equal(t, int64(120), r.Ops, r.Mode)
		require.Zero(t, r.Errors, r.Mode)
		require.Empty(t, r.FirstError, r.Mode)
		require.Positive(t, r.CPUPer1000, r.Mode)
		if r.Mode == ModeBatchBare {
			// A repeated key repeats a whole batch: 10 requests of 4 tasks
			// per round.
			continue
		}
		require.Equal(t, dups, r.Duplicates, r.Mode)
		if r.Mode == ModeNaming {
			require.Zero(t, r.Deduplicated)
		} else {
			require.Equal(t, dups, r.Deduplicated, "%s: every repeated ID is answered as already existing", r.Mode)
		}
		require.Positive(t, r.Throughput, r.Mode)
		require.Positive(t, r.P99, r.Mode)
		require.LessOrEqual(t, r.P50, r.P99, r.Mode)
		require.Positive(t, r.AllocsPerOp, r.Mode)
		require.NotNil(t, r.Ratio, r.Mode)
	}
	require.Equal(t, AllModes(), modes)
	require.Equal(t, 1.0, *rep.Results[0].Ratio)
	for _, sub := range []string{"dispatch", "dispatch-strict", "dispatch-batched", "interval"} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		require.NoError(t, err, sub)
		require.NotEmpty(t, entries, "the %s outbox recorded the dispatches", sub)
	}
}

func TestRunWithFaults(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Config{
		Modes: []Mode{ModeCreateBare, ModeMemory, ModeTimer},
		Count: 200, Rounds: 2, Concurrency: 4, FaultRate: 0.2, CommitThenFailRate: 0.1,
	}, nil)
	require.NoError(t, err)
	bare, disp, timer := rep.Results[0], rep.Results[1], rep.Results[2]
	require.Positive(t, bare.Errors, "the bare client does not retry")
	require.Contains(t, bare.FirstError, "Unavailable")
	require.Equal(t, int64(200), bare.Ops+bare.Errors)
	for _, r := range []Result{disp, timer} {
		require.Equal(t, int64(200), r.Ops, "%s retries every transient error: %s", r.Mode, r.FirstError)
		require.Zero(t, r.Errors, r.Mode)
	}
}

func TestRunExternalEmulator(t *testing.T) {
	t.Parallel()
	srv, err := emulator.New(emulator.Config{DisableDelivery: true})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	cfg := Config{Modes: []Mode{ModeCreateBare, ModeMemory}, Count: 20, Rounds: 2, Concurrency: 2, EmulatorAddr: srv.Addr()}
	rep, err := Run(context.Background(), cfg, nil)
	require.NoError(t, err)
	require.Equal(t, srv.Addr(), rep.Emulator)
	require.Len(t, srv.Tasks(Queue), 40, "the bench queue was created and every call made one task")

	// A second run against the same emulator uses fresh IDs.
	rep, err = Run(context.Background(), cfg, nil)
	require.NoError(t, err)
	require.Zero(t, rep.Results[0].Deduplicated)
	require.Len(t, srv.Tasks(Queue), 80)
}

func TestRunStopsWhenEveryCallFails(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Config{Modes: []Mode{ModeCreateBare}, Count: 4, Rounds: 1, Concurrency: 1, FaultRate: 1}, nil)
	require.ErrorContains(t, err, "bench: create-bare: every call of round 1 failed: ")
	require.ErrorContains(t, err, "Unavailable")
}

func TestRunForDuration(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Config{Modes: []Mode{ModeNaming, ModeMemory}, Duration: 100 * time.Millisecond, Rounds: 2, Concurrency: 2}, nil)
	require.NoError(t, err)
	require.Zero(t, rep.Config.Count)
	for _, r := range rep.Results {
		require.Positive(t, r.Ops, r.Mode)
		require.Zero(t, r.Errors, r.Mode)
		require.Positive(t, r.Elapsed, r.Mode)
	}
}

func TestRunInvalidConfig(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Config{Concurrency: -1}, nil)
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestRunCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Config{Modes: []Mode{ModeNaming}, Count: 10, Rounds: 1}, nil)
	require.ErrorIs(t, err, context.Canceled)
}

func TestWriteJSON(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Config{Modes: []Mode{ModeCreateBare, ModeNaming}, Count: 8, Rounds: 2, Concurrency: 2}, nil)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, rep.WriteJSON(&buf))
	var got map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
	require.ElementsMatch(t, []string{"date", "emulator", "gomaxprocs", "config", "results"}, keys(got))
	require.Equal(t, map[string]any{
		"modes": []any{"create-bare", "naming"}, "concurrency": 2.0, "count": 8.0, "duration_seconds": 0.0, "rounds": 2.0,
		"payload_size": 256.0, "duplicate_ratio": 0.0, "fault_rate": 0.0, "commit_then_fail_rate": 0.0, "seed": 1.0,
		"latency_us": 0.0, "batch_size": 2.0, "batch_in_flight": 4.0,
	}, got["config"])
	results := got["results"].([]any)
	require.Len(t, results, 2)
	for i, mode := range []string{"create-bare", "naming"} {
		r := results[i].(map[string]any)
		require.ElementsMatch(t, []string{"mode", "ops", "errors", "duplicates", "deduplicated", "elapsed_seconds",
			"ops_per_second", "p50_us", "p99_us", "allocs_per_op", "cpu_seconds_per_1000", "ratio_vs_bare", "ratio_vs_batch_bare"}, keys(r))
		require.Equal(t, mode, r["mode"])
		require.Equal(t, 8.0, r["ops"])
	}
	require.Equal(t, 1.0, results[0].(map[string]any)["ratio_vs_bare"])
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestTemporaryOutboxIsRemoved(t *testing.T) {
	t.Parallel()
	c := Config{Modes: []Mode{ModeInterval}}.WithDefaults()
	tg, err := newTarget(context.Background(), c, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NotEmpty(t, tg.tempDir)
	require.DirExists(t, filepath.Join(tg.tempDir, "interval"))
	require.NoError(t, tg.close())
	require.NoDirExists(t, tg.tempDir)
}
