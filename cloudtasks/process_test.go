package cloudtasks_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/google/uuid"
	"github.com/googleapis/gax-go/v2"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// The tests below re-run this test binary as separate dispatcher
// processes. The child reads what to do from these variables.
const (
	envHelper = "CTDISPATCH_TEST_HELPER" // "herd" or "kill"
	envAddr   = "CTDISPATCH_TEST_ADDR"
	envRoot   = "CTDISPATCH_TEST_ROOT"
	envCount  = "CTDISPATCH_TEST_COUNT"
	envMode   = "CTDISPATCH_TEST_DURABILITY"
	envBatch  = "CTDISPATCH_TEST_BATCH"
)

// TestHelperProcess is not a test: it is the body of a child process.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(envHelper)
	if mode == "" {
		t.Skip("runs only as a child process")
	}
	ctx := context.Background()
	// The parent started the emulator; the child reaches it by address.
	addr := os.Getenv(envAddr)
	cfg := cloudtasks.Config{Project: "proj", Location: "europe-west1", Queue: "default"}
	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: os.Getenv(envRoot), ProcessorUUID: uuid.Must(uuid.NewV7())})
	require.NoError(t, err)
	switch mode {
	case "herd":
		cfg.EmulatorAddr = addr
		d, err := cloudtasks.NewDispatcher(ctx, box, &cfg)
		require.NoError(t, err)
		n, _ := strconv.Atoi(os.Getenv(envCount))
		outcomes := herd(t, n, func(int) (cloudtasks.DispatchResult, error) {
			return d.Dispatch(ctx, request("run1", "procs", 1, `{"k":"v"}`))
		})
		require.NoError(t, d.Close(context.Background()))
		require.NoError(t, box.Close())
		require.NoError(t, json.NewEncoder(os.Stdout).Encode(outcomes))
	case "answers":
		// Dispatch distinct IDs from 16 callers and print each answered ID
		// at once, until the parent kills the process.
		cfg.EmulatorAddr, cfg.Durability = addr, cloudtasks.Durability(os.Getenv(envMode))
		cfg.Batch = os.Getenv(envBatch) != ""
		d, err := cloudtasks.NewDispatcher(ctx, box, &cfg)
		require.NoError(t, err)
		n, _ := strconv.Atoi(os.Getenv(envCount))
		var next atomic.Int64
		var out sync.Mutex
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for i := next.Add(1); i <= int64(n); i = next.Add(1) {
					res, err := d.Dispatch(ctx, request("run1", "crash", uint64(i), "x"))
					if err != nil {
						continue
					}
					out.Lock()
					os.Stdout.WriteString(res.ID + "\n")
					out.Unlock()
				}
			})
		}
		wg.Wait()
		t.Fatal("the process should have been killed before it answered every call")
	case "kill":
		client, err := ctapi.NewClient(ctx, emulator.ClientOptions(addr)...)
		require.NoError(t, err)
		cfg.Client = exitAfterCreate{client}
		d, err := cloudtasks.NewDispatcher(ctx, box, &cfg)
		require.NoError(t, err)
		_, err = d.Dispatch(ctx, request("run1", "killed", 1, "x"))
		t.Fatalf("the process should have died; Dispatch returned %v", err)
	}
}

// exitAfterCreate ends the process as soon as CreateTask has succeeded,
// before the dispatcher can record the outcome: a kill -9 at the worst
// moment.
type exitAfterCreate struct{ cloudtasks.Client }

func (e exitAfterCreate) CreateTask(ctx context.Context, req *cloudtaskspb.CreateTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error) {
	task, err := e.Client.CreateTask(ctx, req, opts...)
	if err == nil {
		os.Exit(7)
	}
	return task, err
}

func child(t *testing.T, mode, addr, root string, extra ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHelper+"="+mode, envAddr+"="+addr, envRoot+"="+root)
	cmd.Env = append(cmd.Env, extra...)
	return cmd
}

// Three separate processes, each with 334 concurrent identical calls, share
// one outbox root and one server: one task, one "created".
func TestDispatchThunderingHerdProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	emu := startEmulator(t, nil)
	root := t.TempDir()
	const procs, each = 3, 334
	total := map[cloudtasks.Outcome]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range procs {
		wg.Go(func() {
			cmd := child(t, "herd", emu.Addr(), root, envCount+"="+strconv.Itoa(each))
			out, err := cmd.Output()
			if !assertNoError(t, err, out) {
				return
			}
			var got map[cloudtasks.Outcome]int
			// The test framework prints "PASS" after the child's line.
			if err := json.NewDecoder(bytes.NewReader(out)).Decode(&got); err != nil {
				t.Errorf("child output %q: %v", out, err)
				return
			}
			mu.Lock()
			for k, v := range got {
				total[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Equal(t, map[cloudtasks.Outcome]int{cloudtasks.OutcomeCreated: 1, cloudtasks.OutcomeAlreadyExisted: procs*each - 1}, total)
	require.Equal(t, 1, emu.TaskCount())
}

// A process killed between recording pending and recording the outcome:
// another instance's Recover finishes the record, no second task is
// created, and the history names both processors.
func TestRecoverAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	t.Parallel()
	emu := startEmulator(t, nil)
	root := t.TempDir()
	out, err := child(t, "kill", emu.Addr(), root).CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "child output: %s", out)
	require.Equal(t, 7, exit.ExitCode(), "child output: %s", out)

	// Recovery runs an hour later, so the record is stale.
	clock := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	w := &world{emu: emu, clock: clock, root: root}
	p := w.open(t, nil)
	const id = "dispatch:run1:killed:1"
	before := p.history(t, id)
	require.Equal(t, []outbox.Status{outbox.StatusPending}, statuses(before))
	dead := before[0].ProcessorUUID

	st, err := p.d.Recover(context.Background())
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RecoverStats{Stale: 1, Found: 1, HandedOver: 1}, st)

	recs := p.history(t, id)
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusAlreadyExisted}, statuses(recs))
	require.Equal(t, []string{dead, p.d.ProcessorUUID()}, []string{recs[0].ProcessorUUID, recs[1].ProcessorUUID})
	require.NotEqual(t, dead, p.d.ProcessorUUID())
	require.Equal(t, int64(1), cloudtasks.Counter(t, p.reader, cloudtasks.MetricHandovers))
	require.Equal(t, int64(1), cloudtasks.Counter(t, p.reader, cloudtasks.MetricRecoveries))

	// The caller's repeat is answered from the outbox.
	res, err := p.d.Dispatch(context.Background(), request("run1", "killed", 1, "x"))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeAlreadyExisted, res.Outcome)
	require.True(t, res.Skipped)
	require.Equal(t, 1, emu.TaskCount())

	// A second pass finds nothing to do.
	st, err = p.d.Recover(context.Background())
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RecoverStats{}, st)
}

// A process SIGKILLed while it answers calls, in every mode that records in
// an outbox, alone and with batching: every call it answered has a record
// that survived (pending at least; in strict mode the outcome), and
// Recover turns the pending ones into created.
func TestAnsweredCallsSurviveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	for _, batch := range []bool{false, true} {
		for _, mode := range outboxModes {
			name := string(mode)
			if batch {
				name += "-batched"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				answeredCallsSurviveKill(t, mode, batch)
			})
		}
	}
}

func answeredCallsSurviveKill(t *testing.T, mode cloudtasks.Durability, batch bool) {
	emu := startEmulator(t, nil)
	root := t.TempDir()
	env := []string{envCount + "=100000", envMode + "=" + string(mode)}
	if batch {
		env = append(env, envBatch+"=1")
	}
	cmd := child(t, "answers", emu.Addr(), root, env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	var answered []string
	for sc.Scan() {
		answered = append(answered, sc.Text())
		if len(answered) == 300 {
			require.NoError(t, cmd.Process.Kill())
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, "signal: killed", exit.Error())
	require.GreaterOrEqual(t, len(answered), 300)

	clock := clockwork.NewFakeClockAt(time.Now().Add(time.Hour))
	w := &world{emu: emu, clock: clock, root: root}
	p := w.open(t, nil)
	allowed := map[outbox.Status]bool{outbox.StatusCreated: true, outbox.StatusAlreadyExisted: true}
	if mode != cloudtasks.DurabilityStrict {
		allowed[outbox.StatusPending] = true
	}
	ctx := context.Background()
	for _, id := range answered {
		rec, found, err := p.d.Latest(ctx, id)
		require.NoError(t, err)
		require.True(t, found, "answered %s has no record", id)
		require.True(t, allowed[rec.Status], "answered %s is %s", id, rec.Status)
	}
	_, err = p.d.Recover(ctx)
	require.NoError(t, err)
	for _, id := range answered {
		rec, _, err := p.d.Latest(ctx, id)
		require.NoError(t, err)
		require.Contains(t, []outbox.Status{outbox.StatusCreated, outbox.StatusAlreadyExisted}, rec.Status, id)
	}
}

func assertNoError(t *testing.T, err error, out []byte) bool {
	t.Helper()
	if err != nil {
		var stderr string
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Errorf("child: %v\nstdout: %s\nstderr: %s", err, out, stderr)
		return false
	}
	return true
}
