package chaos

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// binary is the ctdispatch executable the children run, built once
// without the race detector: the children are separate programs, and the
// suite's multi-process sizes would be slow if instrumented.
var binary string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run() // the tests that need the binary skip themselves
	}
	dir, err := os.MkdirTemp("", "ctdispatch-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "ctdispatch")
	cmd := exec.Command("go", "build", "-o", binary, "github.com/ctdispatch/ctdispatch/cmd/ctdispatch")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "build ctdispatch: %v\n%s", err, stderr.String())
		return 1
	}
	return m.Run()
}

// TestSuite runs every scenario at the default sizes and requires that
// all held; the busy day runs short in TestBusyDayShort instead, and e2e
// in TestE2EShort. With
// CTDISPATCH_CHAOS_LONG=1 it runs every scenario at the long sizes, the
// busy day included (on a directory and on fake-gcs-server).
func TestSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite starts many processes")
	}
	long := os.Getenv("CTDISPATCH_CHAOS_LONG") == "1"
	opts := Options{Seed: 20260601, Binary: binary, Long: long, Dir: t.TempDir()}
	opts.Only = slices.DeleteFunc(slices.Clone(Scenarios), func(s string) bool { return s == ScenarioBusyDay || s == ScenarioE2E })
	if long {
		opts.Only, opts.GCSEmulator = Scenarios, startFakeGCS(t)
	}
	var out bytes.Buffer
	opts.Out = &out
	rep, err := Run(context.Background(), opts)
	t.Log("\n" + out.String())
	require.NoError(t, err)
	require.Len(t, rep.Results, len(opts.Only))
	for _, res := range rep.Results {
		require.True(t, res.Passed, res.Line())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Equal(t, fmt.Sprintf("%d passed, 0 failed", len(opts.Only)), lines[len(lines)-1])
}

// plantTask creates a task that no request names.
func plantTask(t *testing.T, emu *emulator.Server) {
	t.Helper()
	ctx := context.Background()
	c, err := emu.NewClient(ctx)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queuePath, Task: &cloudtaskspb.Task{
		Name: queuePath + "/tasks/planted-duplicate",
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url: targetURL, HttpMethod: cloudtaskspb.HttpMethod_POST}},
	}})
	require.NoError(t, err)
}

// The checks are not vacuous: a task planted after the load, or one
// deleted, turns a scenario into a FAIL line and the run into "0 passed".
func TestScenarioCanFail(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	tests := []struct {
		scenario string
		plant    func(*testing.T, *emulator.Server)
		want     []string
	}{
		{ScenarioHerd, plantTask, []string{"FAIL herd: ", "51 tasks in the queue, want 50", "1 tasks that no request names"}},
		{ScenarioFaults, func(t *testing.T, emu *emulator.Server) {
			tasks := emu.Tasks(queuePath)
			ctx := context.Background()
			c, err := emu.NewClient(ctx)
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, emu.SetFaults(emulator.Faults{}))
			require.NoError(t, c.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: tasks[0].GetName()}))
		}, []string{"FAIL faults: ", "61 tasks in the queue, want 62", "1 requested tasks do not exist"}},
		{ScenarioBusyDay, plantTask, []string{"FAIL busy-day: ", "local directory: 51 tasks in the queue, want 50", "local directory: 1 tasks that no request names"}},
	}
	for _, tt := range tests {
		t.Run(tt.scenario, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			opts := Options{Seed: 7, Binary: binary, Out: &out, Only: []string{tt.scenario}, Requests: 50, DayLength: 2 * time.Second, Dir: t.TempDir()}
			opts.afterRun = func(_ string, emu *emulator.Server) { tt.plant(t, emu) }
			rep, err := Run(context.Background(), opts)
			require.NoError(t, err)
			require.False(t, rep.OK())
			require.Equal(t, 1, rep.Failed)
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			require.Len(t, lines, 3, out.String())
			for _, w := range tt.want {
				require.Contains(t, lines[1], w)
			}
			require.Equal(t, "0 passed, 1 failed", lines[2])
		})
	}
}

func TestOptionsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		opts Options
		want string
	}{
		{Options{Only: []string{"nope"}}, `chaos: Options.Only "nope" is not a scenario; allowed: herd, crash, faults, bad-input, recover-herd, disk-full, busy-day, e2e`},
		{Options{Only: []string{ScenarioCrash}}, `chaos: Options.Binary "" is required: the herd, crash, bad-input, recover-herd, disk-full, busy-day, e2e scenarios start ctdispatch processes`},
		{Options{Only: []string{ScenarioFaults}, Requests: -1}, `chaos: Options.Requests "-1" is negative`},
		{Options{Only: []string{ScenarioFaults}, Kills: -2}, `chaos: Options.Kills "-2" is negative`},
		{Options{Only: []string{ScenarioFaults}, DayLength: -time.Second}, `chaos: Options.DayLength "-1s" is negative`},
	}
	for _, tt := range tests {
		_, err := Run(context.Background(), tt.opts)
		require.EqualError(t, err, tt.want)
		require.True(t, errors.Is(err, ErrInvalidOptions))
		var oe *OptionsError
		require.ErrorAs(t, err, &oe)
	}
}

func TestSizes(t *testing.T) {
	t.Parallel()
	require.Equal(t, 10_000, Options{}.size(DefaultHerdRequests))
	require.Equal(t, 50_000, Options{Long: true}.size(DefaultHerdRequests))
	require.Equal(t, 7, Options{Long: true, Requests: 7}.size(DefaultHerdRequests))
	require.Equal(t, 20, Options{}.kills())
	require.Equal(t, 100, Options{Long: true}.kills())
	require.Equal(t, 3, Options{Kills: 3}.kills())
}

func TestCheckOutbox(t *testing.T) {
	t.Parallel()
	rec := func(s outbox.Status) outbox.Record { return outbox.Record{Status: s} }
	want := map[string]bool{"a": true, "b": true}
	tests := []struct {
		name string
		t    tally
		rl   rules
		want []string
	}{
		{"all held", tally{latest: map[string]outbox.Record{"a": rec(outbox.StatusCreated), "b": rec(outbox.StatusAlreadyExisted)},
			created: map[string]int{"a": 1}}, rules{}, nil},
		{"missing and pending", tally{latest: map[string]outbox.Record{"a": rec(outbox.StatusPending)}}, rules{},
			[]string{"1 IDs have no outbox record (e.g. b)", "1 IDs end in a non-terminal state (e.g. a is pending)"}},
		{"created twice", tally{latest: map[string]outbox.Record{"a": rec(outbox.StatusCreated), "b": rec(outbox.StatusCreated)},
			created: map[string]int{"a": 2, "b": 1}}, rules{}, []string{`1 IDs have more than one "created" record (e.g. a has 2)`}},
		{"exactly one created", tally{latest: map[string]outbox.Record{"a": rec(outbox.StatusCreated), "b": rec(outbox.StatusAlreadyExisted)},
			created: map[string]int{"a": 1}}, rules{oneCreated: true}, []string{`1 IDs have not exactly one "created" record (e.g. b has 0)`}},
		{"others and damage", tally{latest: map[string]outbox.Record{"a": rec(outbox.StatusCreated), "b": rec(outbox.StatusCreated), "c": rec(outbox.StatusCreated)},
			damaged: []string{"outbox: x.parquet: not a readable Parquet file"}}, rules{},
			[]string{"1 outbox IDs were never requested", "1 unreadable outbox files (outbox: x.parquet: not a readable Parquet file)"}},
		{"others allowed", tally{latest: map[string]outbox.Record{"a": rec(outbox.StatusCreated), "b": rec(outbox.StatusCreated), "c": rec(outbox.StatusCreated)}},
			rules{othersAllowed: true}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, checkOutbox(tt.t, want, tt.rl))
		})
	}
}
