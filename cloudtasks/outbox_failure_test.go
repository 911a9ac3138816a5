package cloudtasks_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// errDiskFull stands for an outbox that cannot make records durable.
var errDiskFull = errors.New("write wal: no space left on device")

// brokenOutbox is an in-memory outbox whose appends fail while broken.
// It has only the Outbox methods, as a Parquet outbox, whose log is what
// breaks: every record, the pending one too, goes through its Append.
type brokenOutbox struct {
	outbox.Outbox
	broken atomic.Bool
	// refusing makes every append fail at once, the way an outbox that
	// already knows its log is unwritable refuses records.
	refusing atomic.Bool
	// outcomes hears of each outcome (not pending) record kept; the
	// dispatcher appends it after answering.
	outcomes chan struct{}
}

// Append fails the way a group commit does while broken: the record is
// taken and its commit fails (done hears it; without done, the error is
// returned at once, as nobody would hear it otherwise). While refusing, it
// fails at once.
func (b *brokenOutbox) Append(ctx context.Context, r outbox.Record, done func(error)) error {
	switch {
	case b.refusing.Load():
		return errDiskFull
	case b.broken.Load() && done == nil:
		return errDiskFull
	case b.broken.Load():
		done(errDiskFull)
		return nil
	}
	if err := b.Outbox.Append(ctx, r, done); err != nil {
		return err
	}
	if r.Status != outbox.StatusPending {
		select {
		case b.outcomes <- struct{}{}:
		default:
		}
	}
	return nil
}

// outboxModes are the modes that record in an outbox.
var outboxModes = []cloudtasks.Durability{cloudtasks.DurabilityOverlapped, cloudtasks.DurabilityStrict}

func newBrokenSetup(t *testing.T, mode cloudtasks.Durability) (*cloudtasks.Dispatcher, *brokenOutbox, *emulator.Server, *sdkmetric.ManualReader) {
	t.Helper()
	w := newWorld(t)
	box := &brokenOutbox{Outbox: outbox.NewMemory(w.clock), outcomes: make(chan struct{}, 1)}
	reader := sdkmetric.NewManualReader()
	cfg := cloudtasks.Config{Project: "proj", Location: "europe-west1", Queue: "default", EmulatorAddr: w.emu.Addr(),
		Durability: mode, Clock: w.clock, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))}
	d, err := cloudtasks.NewDispatcher(context.Background(), box, &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	return d, box, w.emu, reader
}

// An outbox that cannot record from the start stops every call before
// Cloud Tasks is asked, in every mode.
func TestOutboxUnavailableFailsClosed(t *testing.T) {
	t.Parallel()
	for _, mode := range outboxModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			d, box, emu, reader := newBrokenSetup(t, mode)
			box.broken.Store(true)
			for i := range 5 {
				_, err := d.Dispatch(context.Background(), request("run1", "t", uint64(i), "x"))
				require.ErrorIs(t, err, cloudtasks.ErrOutboxUnavailable)
				require.ErrorIs(t, err, errDiskFull)
				var oe *cloudtasks.OutboxError
				require.ErrorAs(t, err, &oe)
				require.True(t, oe.BeforeCall)
			}
			require.Equal(t, 0, emu.TaskCount())
			require.Empty(t, emu.RememberedNames())
			require.Equal(t, int64(0), cloudtasks.Counter(t, reader, cloudtasks.MetricCalls, attribute.String("method", "CreateTask")))
			require.Equal(t, int64(5), cloudtasks.Counter(t, reader, cloudtasks.MetricOutcomes, attribute.String("outcome", "outbox_unavailable")))
		})
	}
}

// setupRecorded is newBrokenSetup after one call whose records the outbox
// made durable, so the dispatcher trusts the outbox.
func setupRecorded(t *testing.T, mode cloudtasks.Durability) (*cloudtasks.Dispatcher, *brokenOutbox, *emulator.Server) {
	t.Helper()
	d, box, emu, _ := newBrokenSetup(t, mode)
	_, err := d.Dispatch(context.Background(), request("run1", "t", 0, "x"))
	require.NoError(t, err)
	select {
	case <-box.outcomes:
	case <-time.After(30 * time.Second):
		t.Fatal("the outcome record was never kept")
	}
	return d, box, emu
}

// An outbox that breaks while calls run: after the first failure is seen,
// no call reaches Cloud Tasks until the outbox records again. In the
// overlapped modes the call whose pending record failed beside the create
// call may have created its task; it is not answered, and its repeat after
// the outbox heals is answered already_existed.
func TestOutboxBreaksThenHeals(t *testing.T) {
	t.Parallel()
	for _, mode := range outboxModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			d, box, emu := setupRecorded(t, mode)
			ctx := context.Background()
			box.broken.Store(true)

			_, err := d.Dispatch(ctx, request("run1", "t", 1, "x"))
			var oe *cloudtasks.OutboxError
			require.ErrorAs(t, err, &oe)
			wantTasks := 1
			if mode != cloudtasks.DurabilityStrict {
				require.False(t, oe.BeforeCall)
				wantTasks = 2
			} else {
				require.True(t, oe.BeforeCall)
			}
			_, err = d.Dispatch(ctx, request("run1", "t", 2, "x"))
			require.ErrorAs(t, err, &oe)
			require.True(t, oe.BeforeCall)
			require.Equal(t, wantTasks, emu.TaskCount())

			box.broken.Store(false)
			res, err := d.Dispatch(ctx, request("run1", "t", 1, "x"))
			require.NoError(t, err)
			want := map[cloudtasks.Durability]cloudtasks.Outcome{cloudtasks.DurabilityStrict: cloudtasks.OutcomeCreated, cloudtasks.DurabilityOverlapped: cloudtasks.OutcomeAlreadyExisted}
			require.Equal(t, want[mode], res.Outcome)
			res, err = d.Dispatch(ctx, request("run1", "t", 2, "x"))
			require.NoError(t, err)
			require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)
			require.Equal(t, 3, emu.TaskCount())
		})
	}
}

// An outbox that refuses the pending record at once stops the call before
// Cloud Tasks is asked in every mode, even once it had recorded: no task
// is created that the outbox was known unable to record.
func TestOutboxRefusingStopsTheCall(t *testing.T) {
	t.Parallel()
	for _, mode := range outboxModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			d, box, emu := setupRecorded(t, mode)
			box.refusing.Store(true)

			_, err := d.Dispatch(context.Background(), request("run1", "t", 1, "x"))
			require.ErrorIs(t, err, errDiskFull)
			var oe *cloudtasks.OutboxError
			require.ErrorAs(t, err, &oe)
			require.True(t, oe.BeforeCall)
			require.Equal(t, 1, emu.TaskCount())
		})
	}
}

// dispatcherOver opens a dispatcher of the world's queue over box, closed
// at the test's end.
func dispatcherOver(t *testing.T, w *world, box outbox.Outbox) *cloudtasks.Dispatcher {
	t.Helper()
	d, err := cloudtasks.NewDispatcher(context.Background(), box, &cloudtasks.Config{
		Project: "proj", Location: "europe-west1", Queue: "default", EmulatorAddr: w.emu.Addr(), Clock: w.clock})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	return d
}

// unreadableOutbox is an in-memory outbox whose reads fail. It has only
// the Outbox methods, so that every read goes through Latest and Pending.
type unreadableOutbox struct{ outbox.Outbox }

func (unreadableOutbox) Latest(context.Context, outbox.Table, string) (outbox.Record, bool, error) {
	return outbox.Record{}, false, errDiskFull
}

func (unreadableOutbox) Pending(context.Context, outbox.Table, time.Duration) ([]outbox.Record, error) {
	return nil, errDiskFull
}

// An outbox that cannot be read stops Dispatch, Cancel and Recover before
// any call, each with an *OutboxError that says what failed.
func TestOutboxUnreadableIsAnOutboxError(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	d := dispatcherOver(t, w, unreadableOutbox{outbox.NewMemory(w.clock)})
	ctx := context.Background()

	_, err := d.Dispatch(ctx, request("run1", "t", 1, "x"))
	require.ErrorIs(t, err, cloudtasks.ErrOutboxUnavailable)
	require.ErrorIs(t, err, errDiskFull)
	var oe *cloudtasks.OutboxError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, cloudtasks.OutboxError{ID: "dispatch:run1:t:1", Op: cloudtasks.OpRead, BeforeCall: true, Err: errDiskFull}, *oe)
	require.Equal(t, "cloudtasks: dispatch:run1:t:1: outbox could not read the ID's record (the Cloud Tasks call was not made): "+errDiskFull.Error(), err.Error())

	_, err = d.Cancel(ctx, "dispatch:run1:t:1", "default")
	require.ErrorAs(t, err, &oe)
	require.Equal(t, cloudtasks.OpRead, oe.Op)

	_, err = d.Recover(ctx)
	require.ErrorAs(t, err, &oe)
	require.Equal(t, cloudtasks.OpListPending, oe.Op)
	require.Equal(t, "cloudtasks: recover: outbox could not list the pending records (the Cloud Tasks call was not made): dispatch_outbox: "+errDiskFull.Error(), err.Error())
	require.Equal(t, 0, w.emu.TaskCount())
}

// A cancel whose DeleteTask was made but whose record could not be
// written says both: the result says the task was deleted, the error
// that the outbox does not know it.
func TestCancelNotRecordedIsAnOutboxError(t *testing.T) {
	t.Parallel()
	for _, mode := range outboxModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			d, box, emu := setupRecorded(t, mode)
			box.broken.Store(true)
			res, err := d.Cancel(context.Background(), "dispatch:run1:t:0", "")
			require.ErrorIs(t, err, cloudtasks.ErrOutboxUnavailable)
			var oe *cloudtasks.OutboxError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, cloudtasks.OpRecordCancel, oe.Op)
			require.Equal(t, cloudtasks.CancelDeleted, res.Outcome)
			require.Equal(t, 0, emu.TaskCount())
		})
	}
}

// Recover with a context that has already ended starts nothing and says
// so.
func TestRecoverWithEndedContextStartsNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	d := dispatcherOver(t, w, outbox.NewMemory(w.clock))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, err := d.Recover(ctx)
	require.ErrorIs(t, err, cloudtasks.ErrNotStarted)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, cloudtasks.RecoverStats{}, st)
	require.Equal(t, "cloudtasks: recover not started: the context ended first (context canceled); no call was made", err.Error())
}

// errAnswerLost stands for a commit whose acknowledgement never came: the
// connection to the database dropped while the record committed.
var errAnswerLost = fmt.Errorf("commit: unexpected EOF (%w)", outbox.ErrKeptUnknown)

// lostAnswerOutbox is an in-memory outbox that, while losing, keeps each
// record and then reports that its answer was lost. It embeds the Outbox
// interface, not *outbox.Memory, so that Memory's Reserve (which would
// write the pending record without this Append) stays hidden, as a store
// that appends through a log would.
type lostAnswerOutbox struct {
	outbox.Outbox
	losing atomic.Bool
}

func (b *lostAnswerOutbox) Append(ctx context.Context, r outbox.Record, done func(error)) error {
	if !b.losing.Load() {
		return b.Outbox.Append(ctx, r, done)
	}
	if err := b.Outbox.Append(ctx, r, nil); err != nil {
		return err
	}
	if done == nil {
		return errAnswerLost
	}
	done(errAnswerLost)
	return nil
}

// When the outbox loses its answer to the pending record written before
// the call, Dispatch does not say the record could not be written: it may
// be kept (here it is), so the answer is the typed unknown, which still
// matches ErrOutboxUnavailable; no call was made, and the repeat goes on
// from the kept record. In overlapped mode, once the outbox has kept
// records, the pending record is written beside the call: the answer is
// withheld and says that the task may exist.
func TestLostAnswerToThePendingRecord(t *testing.T) {
	t.Parallel()
	for _, mode := range outboxModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			box := &lostAnswerOutbox{Outbox: outbox.NewMemory(w.clock)}
			box.losing.Store(true)
			ctx := context.Background()
			d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{
				Project: "proj", Location: "europe-west1", Queue: "default", EmulatorAddr: w.emu.Addr(), Clock: w.clock, Durability: mode})
			require.NoError(t, err)
			t.Cleanup(func() { d.Close(context.Background()) })
			const id = "dispatch:run1:t:1"
			_, err = d.Dispatch(ctx, request("run1", "t", 1, "x"))
			require.ErrorIs(t, err, cloudtasks.ErrOutboxUnavailable)
			require.ErrorIs(t, err, cloudtasks.ErrIndeterminate)
			var ie *cloudtasks.IndeterminateError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, cloudtasks.UnknownPendingRecord, ie.Unknown)
			require.EqualError(t, err, "cloudtasks: "+id+": outcome indeterminate (pending_record unknown): unknown whether the outbox could record the pending state, whose answer was lost (the Cloud Tasks call was not made): commit: unexpected EOF (outbox: whether the record was kept is unknown)")
			require.Equal(t, 0, w.emu.TaskCount(), "no call")
			rec, ok, err := box.Latest(ctx, outbox.TableDispatch, id)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, outbox.StatusPending, rec.Status, "kept all the same")

			box.losing.Store(false)
			res, err := d.Dispatch(ctx, request("run1", "t", 1, "x"))
			require.NoError(t, err)
			require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)
			require.Equal(t, 1, w.emu.TaskCount())
			if mode == cloudtasks.DurabilityStrict {
				return
			}

			box.losing.Store(true)
			_, err = d.Dispatch(ctx, request("run1", "t", 2, "x"))
			require.False(t, errors.Is(err, cloudtasks.ErrIndeterminate), "the call was made beside the record")
			require.EqualError(t, err, "cloudtasks: dispatch:run1:t:2: unknown whether the outbox could record the pending state, whose answer was lost (the task may exist; repeat the call once the outbox works): commit: unexpected EOF (outbox: whether the record was kept is unknown)")
			require.Equal(t, 2, w.emu.TaskCount())
		})
	}
}
