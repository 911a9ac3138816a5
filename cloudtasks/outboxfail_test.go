package cloudtasks

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// errDiskFull stands for an outbox that cannot make records durable.
var errDiskFull = errors.New("write wal: no space left on device")

// brokenOutbox is an in-memory outbox whose appends fail while broken.
type brokenOutbox struct {
	*outbox.Memory
	broken atomic.Bool
	// refusing makes every append fail at once, the way an outbox that
	// already knows its log is unwritable refuses records.
	refusing atomic.Bool
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
	return b.Memory.Append(ctx, r, done)
}

// outboxModes are the modes that record in an outbox.
var outboxModes = []Durability{DurabilityOverlapped, DurabilityStrict}

func newBrokenSetup(t *testing.T, mode Durability) (*Dispatcher, *brokenOutbox, emuBackend, *sdkmetric.ManualReader) {
	t.Helper()
	emu := startEmulator(t)
	box := &brokenOutbox{Memory: outbox.NewMemory(clockwork.NewRealClock())}
	reader := sdkmetric.NewManualReader()
	cfg := testConfig()
	cfg.Client, cfg.Durability = emu.client(t), mode
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	d, err := NewDispatcher(context.Background(), box, &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	return d, box, emu, reader
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
				require.ErrorIs(t, err, ErrOutboxUnavailable)
				require.ErrorIs(t, err, errDiskFull)
				var oe *OutboxError
				require.ErrorAs(t, err, &oe)
				require.True(t, oe.BeforeCall)
			}
			require.Equal(t, 0, emu.TaskCount())
			require.Empty(t, emu.RememberedNames())
			require.Equal(t, int64(0), counter(t, reader, MetricCalls, attribute.String("method", "CreateTask")))
			require.Equal(t, int64(5), counter(t, reader, MetricOutcomes, attribute.String("outcome", "outbox_unavailable")))
		})
	}
}

// setupRecorded is newBrokenSetup after one call whose records the outbox
// made durable, so the dispatcher trusts the outbox.
func setupRecorded(t *testing.T, mode Durability) (*Dispatcher, *brokenOutbox, emuBackend) {
	t.Helper()
	d, box, emu, _ := newBrokenSetup(t, mode)
	_, err := d.Dispatch(context.Background(), request("run1", "t", 0, "x"))
	require.NoError(t, err)
	settle(d)
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
			var oe *OutboxError
			require.ErrorAs(t, err, &oe)
			wantTasks := 1
			if mode != DurabilityStrict {
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
			want := map[Durability]Outcome{DurabilityStrict: OutcomeCreated, DurabilityOverlapped: OutcomeAlreadyExisted}
			require.Equal(t, want[mode], res.Outcome)
			res, err = d.Dispatch(ctx, request("run1", "t", 2, "x"))
			require.NoError(t, err)
			require.Equal(t, OutcomeCreated, res.Outcome)
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
			var oe *OutboxError
			require.ErrorAs(t, err, &oe)
			require.True(t, oe.BeforeCall)
			require.Equal(t, 1, emu.TaskCount())
		})
	}
}

// slowCommitOutbox is an in-memory outbox that records at once but
// reports an outcome record (not a pending one) kept only when the test
// says so, like a group commit still syncing.
type slowCommitOutbox struct {
	*outbox.Memory
	mu   sync.Mutex
	held []func(error)
	// holding hears of each outcome record held: the dispatcher appends
	// it after answering, so a test waits for it before releasing.
	holding chan struct{}
}

func (s *slowCommitOutbox) Append(ctx context.Context, r outbox.Record, done func(error)) error {
	if r.Status == outbox.StatusPending || done == nil {
		return s.Memory.Append(ctx, r, done)
	}
	if err := s.Memory.Append(ctx, r, nil); err != nil {
		return err
	}
	s.mu.Lock()
	s.held = append(s.held, done)
	s.mu.Unlock()
	s.holding <- struct{}{}
	return nil
}

func (s *slowCommitOutbox) release() {
	s.mu.Lock()
	held := s.held
	s.held = nil
	s.mu.Unlock()
	for _, then := range held {
		then(nil)
	}
}

// An overlapped call is answered before its outcome record is written,
// and its flight stays until the record is: a repeat meanwhile shares the
// answer without a Cloud Tasks call, and Close waits for the record.
func TestAnsweredFlightStaysUntilOutcomeWritten(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	box := &slowCommitOutbox{Memory: outbox.NewMemory(clockwork.NewRealClock()), holding: make(chan struct{}, 1)}
	reader := sdkmetric.NewManualReader()
	cfg := testConfig()
	cfg.Client = emu.client(t)
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	d, err := NewDispatcher(context.Background(), box, &cfg)
	require.NoError(t, err)
	ctx := context.Background()

	req := request("run1", "t", 1, "x")
	first, err := d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, first.Outcome)
	require.Equal(t, 1, d.flights.inFlight())

	again, err := d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, OutcomeAlreadyExisted, again.Outcome)
	require.True(t, again.Skipped)
	require.Equal(t, 0, again.Calls)
	require.Equal(t, int64(1), counter(t, reader, MetricCalls, attribute.String("method", "CreateTask")))

	closing, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorContains(t, d.Close(closing), "1 calls still in flight")
	select {
	case <-box.holding:
	case <-time.After(30 * time.Second):
		t.Fatal("the outcome record was never appended")
	}
	box.release()
	settle(d)
	require.Equal(t, 0, d.flights.inFlight())
}
