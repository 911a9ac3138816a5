package parquetbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox/internal/wal"
)

// faultFS is the real filesystem until full is set; then, like a full
// disk, it still creates files but every write stores half its bytes and
// fails with ENOSPC, and every sync fails.
type faultFS struct {
	wal.OSFS
	full atomic.Bool
	ops  atomic.Int64
}

func (fs *faultFS) Create(path string) (logFile, error) {
	fs.ops.Add(1)
	f, err := fs.OSFS.Create(path)
	if err != nil {
		return nil, err
	}
	return &faultFile{f: f.(*os.File), fs: fs}, nil
}

type faultFile struct {
	f  *os.File
	fs *faultFS
}

func (f *faultFile) Write(p []byte) (int, error) {
	f.fs.ops.Add(1)
	if f.fs.full.Load() {
		n, _ := f.f.Write(p[:len(p)/2])
		return n, &os.PathError{Op: "write", Path: f.f.Name(), Err: syscall.ENOSPC}
	}
	return f.f.Write(p)
}

func (f *faultFile) Sync() error {
	f.fs.ops.Add(1)
	if f.fs.full.Load() {
		return &os.PathError{Op: "sync", Path: f.f.Name(), Err: syscall.ENOSPC}
	}
	return f.f.Sync()
}

func (f *faultFile) Close() error { return f.f.Close() }

// healWatcher passes every log record on to next, and reports the
// outcome of each retry of an unavailable log, which the outbox logs, on
// retries: nil when it healed, else the cause.
type healWatcher struct {
	next    slog.Handler
	retries chan<- error
}

func (h healWatcher) Enabled(context.Context, slog.Level) bool { return true }

func (h healWatcher) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case msgHealed:
		h.retries <- nil
	case msgStillFailed:
		var cause error = errors.New("no err attribute")
		r.Attrs(func(a slog.Attr) bool {
			if e, ok := a.Value.Any().(error); ok && a.Key == "err" {
				cause = e
			}
			return true
		})
		h.retries <- cause
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h healWatcher) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h healWatcher) WithGroup(string) slog.Handler      { return h }

// A full disk makes the writer refuse appends at once, with an error that
// says why and where, and retry until space returns; then appends resume
// in the same process and nothing accepted is lost. It used to jam: the
// first failed segment left a file behind, and every later attempt failed
// on it ("file exists") until a restart.
func TestFullDiskFailsClosedAndHeals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	fs := &faultFS{}
	retries := make(chan error, 16)
	opts := b.options(procA)
	opts.fs = fs
	opts.Logger = slog.New(healWatcher{next: opts.Logger.Handler(), retries: retries})
	o, err := Open(ctx, opts)
	require.NoError(t, err)
	defer o.Close()

	rec := func(task string) outbox.Record { return dispatchRec("full", task, "1", outbox.StatusCreated) }
	require.NoError(t, outbox.AppendAndWait(ctx, o, rec("before-1")))
	require.NoError(t, outbox.AppendAndWait(ctx, o, rec("before-2")))

	fs.full.Store(true)
	err = outbox.AppendAndWait(ctx, o, rec("refused-1"))
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, syscall.ENOSPC)
	var ue *UnavailableError
	require.True(t, errors.As(err, &ue))
	seg := filepath.Join(b.root, walDirName, procA+"-0000000000000000.wal")
	require.Equal(t, seg, ue.Path)
	require.EqualError(t, err, "outbox: unavailable: cannot write the log at "+seg+
		": write "+seg+": no space left on device (appends are refused until a retry succeeds)")

	// Refused at once, without touching the disk.
	ops := fs.ops.Load()
	require.ErrorIs(t, o.Append(ctx, rec("refused-2"), nil), ErrUnavailable)
	require.ErrorIs(t, outbox.AppendAndWait(ctx, o, rec("refused-3")), ErrUnavailable)
	require.Equal(t, ops, fs.ops.Load())

	// Retries fail while the disk is full, each on a new segment name.
	for i := range 3 {
		require.NoError(t, b.clock.BlockUntilContext(ctx, 1)) // the retry timer
		b.clock.Advance(10 * time.Second)
		err := <-retries
		require.ErrorIs(t, err, syscall.ENOSPC, "retry %d", i)
		require.NotErrorIs(t, err, os.ErrExist, "retry %d", i)
		require.ErrorIs(t, outbox.AppendAndWait(ctx, o, rec("refused-4")), ErrUnavailable)
	}

	fs.full.Store(false)
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1))
	b.clock.Advance(10 * time.Second)
	require.NoError(t, <-retries)
	require.NoError(t, outbox.AppendAndWait(ctx, o, rec("after-1")))
	require.NoError(t, o.Append(ctx, rec("after-2"), nil))
	require.NoError(t, o.Close())

	o2 := b.open(t, procA)
	got, err := o2.Lookup(ctx, outbox.Query{RunID: "full"})
	require.NoError(t, err)
	var tasks []string
	for _, r := range got {
		tasks = append(tasks, r.TaskKey)
	}
	require.Equal(t, []string{"after-1", "after-2", "before-1", "before-2"}, tasks)
	require.Contains(t, b.logs.String(), "outbox: log not writable; refusing appends and retrying")
	require.Contains(t, b.logs.String(), "outbox: log writable again; appends resume")
}

// The same on a real 2 MB tmpfs, where the machine lets the test mount
// one (root on Linux): appends until the disk is full, space freed, the
// outbox heals in the same process, and every accepted record survives.
func TestRealFullDiskHeals(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	ctx := context.Background()
	b := setup(t)
	b.root = filepath.Join(dir, "outbox")
	filler := filepath.Join(dir, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, 1<<20), 0o600))

	retries := make(chan error, 64)
	opts := b.options(procA)
	opts.SegmentMaxBytes = 64 << 10
	opts.Logger = slog.New(healWatcher{next: opts.Logger.Handler(), retries: retries})
	o, err := Open(ctx, opts)
	require.NoError(t, err)
	defer o.Close()

	var accepted []string
	var refused error
	for i := 0; i < 100_000 && refused == nil; i++ {
		r := dispatchRec("tmpfs", fmt.Sprintf("task%06d", i), "1", outbox.StatusCreated)
		r.PayloadSHA256 = strings.Repeat("ab", 32)
		if err := outbox.AppendAndWait(ctx, o, r); err != nil {
			refused = err
			break
		}
		accepted = append(accepted, r.ID)
	}
	require.ErrorIs(t, refused, ErrUnavailable)
	require.ErrorIs(t, refused, syscall.ENOSPC)
	require.Contains(t, refused.Error(), "no space left on device")
	require.ErrorIs(t, o.Append(ctx, dispatchRec("tmpfs", "refused", "1", outbox.StatusCreated), nil), ErrUnavailable)

	// The log's conversions retry on the same clock, so the number of
	// timers varies: advance whenever a timer waits, until the writer
	// reports a retry.
	retry := func() error {
		for {
			waitCtx, cancel := context.WithCancel(ctx)
			more := make(chan struct{})
			go func() {
				defer close(more)
				_ = b.clock.BlockUntilContext(waitCtx, 1)
			}()
			select {
			case err := <-retries:
				cancel()
				return err
			case <-more:
				cancel()
				b.clock.Advance(10 * time.Second)
			}
		}
	}
	// A retry while the disk is still full fails (this is where a leftover
	// segment file used to jam the writer for good). Whatever space the
	// failed writes left is taken first, so the disk stays full.
	rest, err := os.Create(filepath.Join(dir, "rest"))
	require.NoError(t, err)
	for _, werr := rest.Write(make([]byte, 4096)); werr == nil; _, werr = rest.Write(make([]byte, 4096)) {
	}
	require.NoError(t, rest.Close())
	require.ErrorIs(t, retry(), syscall.ENOSPC)
	require.NoError(t, os.Remove(filler))
	require.NoError(t, os.Remove(rest.Name()))
	for retry() != nil {
	}
	after := dispatchRec("tmpfs", "after", "1", outbox.StatusCreated)
	require.NoError(t, outbox.AppendAndWait(ctx, o, after))
	accepted = append(accepted, after.ID)
	require.NoError(t, o.Close())

	o2 := b.open(t, procB)
	for _, id := range accepted {
		r, ok, err := o2.Latest(ctx, outbox.TableDispatch, id)
		require.NoError(t, err)
		require.True(t, ok, "%s was accepted and must be recorded", id)
		require.Equal(t, outbox.StatusCreated, r.Status)
	}
	_, ok, err := o2.Latest(ctx, outbox.TableDispatch, "dispatch:tmpfs:refused:1")
	require.NoError(t, err)
	require.False(t, ok)
}
