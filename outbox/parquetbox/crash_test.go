package parquetbox

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/stretchr/testify/require"
)

// crashChildEnv, when set to a directory, turns the test binary into a
// writer that appends until it is killed (see TestCrashLosesNoAcknowledgedAppend).
const (
	crashChildEnv = "CTDISPATCH_OUTBOX_CRASH_CHILD"
	// crashModeEnv selects the child's durability: "durable" or "interval".
	crashModeEnv = "CTDISPATCH_OUTBOX_CRASH_MODE"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	if dir := os.Getenv(compactChildEnv); dir != "" {
		compactChild(dir)
		return
	}
	os.Exit(m.Run())
}

// crashChild appends from several goroutines forever, printing each ID
// once Append has returned. Small segments make it convert logs to Parquet
// while it runs, so the kill also lands in the middle of conversions.
func crashChild(dir string) {
	ctx := context.Background()
	opts := Config{Root: dir, SegmentMaxBytes: 32 << 10}
	if os.Getenv(crashModeEnv) == "interval" {
		// A process crash leaves written data in the kernel: Interval loses
		// nothing then (only a machine crash can lose the last interval).
		opts.Durability = Interval
	}
	o, err := Open(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				r := dispatchRec(fmt.Sprintf("run%d", w), fmt.Sprintf("task%d", i), "1", outbox.StatusCreated)
				if i%3 == 0 {
					r.Table, r.ID, r.Kind = outbox.TableTimers, "timer:retry:"+strings.TrimPrefix(r.ID, "dispatch:")+":1", "retry"
					r.CloudTaskID = mustHash(r.ID)
				}
				if err := outbox.AppendAndWait(ctx, o, r); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(4)
				}
				mu.Lock()
				fmt.Fprintf(out, "%s %s\n", r.Table, r.ID)
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func TestCrashLosesNoAcknowledgedAppend(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	t.Parallel()
	for _, mode := range []string{"durable", "interval"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			crashAndRecover(t, mode)
		})
	}
}

func crashAndRecover(t *testing.T, mode string) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashModeEnv+"="+mode)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())

	acked := map[string]outbox.Table{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		table, id, ok := strings.Cut(sc.Text(), " ")
		require.True(t, ok, sc.Text())
		acked[id] = outbox.Table(table)
		if len(acked) == 1000 {
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			break
		}
	}
	// Lines printed between the last read and the kill are acknowledged too.
	for sc.Scan() {
		if table, id, ok := strings.Cut(sc.Text(), " "); ok {
			acked[id] = outbox.Table(table)
		}
	}
	_ = cmd.Wait()
	require.GreaterOrEqual(t, len(acked), 1000, "child stderr: %s", stderr.String())

	segs, _ := filepath.Glob(filepath.Join(dir, walDirName, "*.wal"))
	require.NotEmpty(t, segs, "the kill left a log to recover")

	b := setup(t)
	b.root = dir
	o := b.open(t, procA) // a new processor adopts the dead one's log
	ctx := context.Background()
	for id, table := range acked {
		got, ok, err := o.Latest(ctx, table, id)
		require.NoError(t, err)
		require.True(t, ok, "acknowledged %s %s lost", table, id)
		require.Equal(t, outbox.StatusCreated, got.Status)
	}
	require.Empty(t, o.Damaged())
	left, _ := filepath.Glob(filepath.Join(dir, walDirName, "*.wal"))
	require.Empty(t, left, "every dead log converted")
	for _, tb := range []outbox.Table{outbox.TableDispatch, outbox.TableTimers} { // what the child writes
		n := 0
		require.NoError(t, o.scanAll(ctx, tb, func(*outbox.Record) { n++ }))
		require.Positive(t, n)
	}
	t.Logf("acknowledged %d appends before SIGKILL; %d log segments recovered", len(acked), len(segs))
}
