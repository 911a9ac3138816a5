package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"

	"github.com/ctdispatch/ctdispatch/internal/gcsjson"
	"github.com/ctdispatch/ctdispatch/internal/pause"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// A `ctdispatch compact` stopped at its commit (CTDISPATCH_PAUSE) while a
// second one takes the unit over and commits, then continued, steps back:
// exit status 4, the unit reported lost, and one output in the partition.
// On a directory and on a gs:// bucket (fake-gcs-server). Time budget:
// about 12s each, of which at least 10s wait for the first one's lease
// (--lease-ttl 10s) to run out on the wall clock. A shorter lease can run
// out before the first one reaches its pause on a loaded machine, under
// the race detector.
func TestBinaryPausedCompactionStepsBack(t *testing.T) {
	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		pausedCompactionStepsBack(t, dir, nil, func() []string {
			files, err := filepath.Glob(filepath.Join(dir, "dispatch_outbox", "created_date=2026-03-01", "*.parquet"))
			require.NoError(t, err)
			return files
		})
	})
	t.Run("gs", func(t *testing.T) {
		gcs := startFakeGCS(t, "fence")
		t.Setenv(gcsjson.EmulatorEnv, gcs)
		root := "gs://fence?prefix=p/"
		pausedCompactionStepsBack(t, root, []string{gcsjson.EmulatorEnv + "=" + gcs}, func() []string {
			b, err := blob.OpenBucket(context.Background(), root)
			require.NoError(t, err)
			defer b.Close()
			var keys []string
			it := b.List(&blob.ListOptions{Prefix: "dispatch_outbox/created_date=2026-03-01/"})
			for {
				obj, err := it.Next(context.Background())
				if errors.Is(err, io.EOF) {
					return keys
				}
				require.NoError(t, err)
				keys = append(keys, obj.Key)
			}
		})
	})
}

func pausedCompactionStepsBack(t *testing.T, root string, env []string, list func() []string) {
	ctx := context.Background()
	const rounds, perRound = 4, 250
	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: root, LogDir: t.TempDir(), Buckets: 1, ProcessorUUID: uuid.MustParse("00000000-0000-4000-8000-0000000000dd")})
	require.NoError(t, err)
	for round := range rounds {
		for i := range perRound {
			task := fmt.Sprintf("t%d", round*perRound+i)
			id, err := naming.NewDispatch("fence", task, naming.Attempt(1))
			require.NoError(t, err)
			r := outbox.Record{Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(),
				Queue: cliQueue, RunID: "fence", TaskKey: task, Attempt: "1", Status: outbox.StatusCreated, CreateCalls: 1,
				CreatedAt: cliT0, UpdatedAt: cliT0}
			require.NoError(t, box.Append(ctx, r, nil))
		}
		require.NoError(t, box.Flush(ctx))
	}
	require.NoError(t, box.Close())
	st, err := func() ([]parquetbox.TableStats, error) {
		r, err := parquetbox.Open(ctx, parquetbox.Config{Root: root, ReadOnly: true})
		require.NoError(t, err)
		defer r.Close()
		return r.Stats(ctx)
	}()
	require.NoError(t, err)
	inBytes := st[0].Bytes

	a := exec.Command(ctdispatchBinary(t), "compact", "--outbox", root, "--lease-ttl", "10s")
	a.Env = append(append(os.Environ(), emulatorEnv+"=", pause.EnvVar+"="+pause.CompactCommit), env...)
	var aOut bytes.Buffer
	a.Stdout = &aOut
	stderr, err := a.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, a.Start())
	t.Cleanup(func() { _ = a.Process.Kill() })
	errs := bufio.NewReader(stderr)
	line, err := errs.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "pause: stopped at compact.commit (pid "+strconv.Itoa(a.Process.Pid)+"); resume with SIGCONT\n", line)
	require.Eventually(t, func() bool { return pause.Stopped(a.Process.Pid) }, 10*time.Second, 5*time.Millisecond)

	// The second compaction finds the unit busy until the first one's
	// lease runs out, then folds it.
	unit := "dispatch_outbox/created_date=2026-03-01"
	// The bound is a safety net for a hung test, not a timing claim: on a
	// loaded machine each run of the binary can take seconds.
	var b binResult
	for deadline := time.Now().Add(2 * time.Minute); ; {
		b = runBinary(t, env, "", "compact", "--outbox", root)
		t.Logf("second compaction: exit %d\n%s%s", b.code, b.stdout, b.stderr)
		if strings.Contains(b.stdout, unit+": compacted:") {
			break
		}
		require.True(t, time.Now().Before(deadline), "the second compaction never folded the unit; last run: exit %d\nstdout:\n%s\nstderr:\n%s", b.code, b.stdout, b.stderr)
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, 0, b.code, b.stderr)

	require.NoError(t, a.Process.Signal(syscall.SIGCONT))
	rest, _ := errs.ReadString(0)
	err = a.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 4, exit.ExitCode(), rest)
	require.Equal(t, "ctdispatch: lost its lease on unit "+unit+" (commit 1 was made by another compaction); stepped back: its outputs were discarded and nothing changed\n", rest)
	require.Equal(t, unit+": lost, stepped back: lost its lease on unit "+unit+" (commit 1 was made by another compaction); stepped back: its outputs were discarded and nothing changed\n"+
		"dispatch_outbox: 4 files, 1000 rows, "+strconv.FormatInt(inBytes, 10)+" bytes -> 0 files, 0 rows, 0 bytes; 0 dropped by retention\n", aOut.String())

	files := list()
	require.Len(t, files, 1, "the second compaction's output alone: %v", files)
	require.Regexp(t, `/compacted-\d+-[0-9a-f]{8}-g1-w4-0\.parquet$`, files[0])

	r, err := parquetbox.Open(ctx, parquetbox.Config{Root: root, ReadOnly: true})
	require.NoError(t, err)
	defer r.Close()
	got, err := r.Lookup(ctx, outbox.Query{RunID: "fence", History: true})
	require.NoError(t, err)
	require.Len(t, got, rounds*perRound)
}
