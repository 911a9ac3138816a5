package cloudtasks

// The tests of this package that need its internals; every other test is in
// the external package cloudtasks_test and uses only the exported API. Kept
// here: the retry loop's delay math and waits (the exported API shows them
// only through OnRetry events), and the flight table's count while an
// answered call's outcome is being recorded. batch_test.go (the batcher's
// queue) and bench_test.go (a bare CreateTask baseline built by the
// dispatcher's own request builder) are internal for the same reason.

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
)

// testBundle is an emulator and a parquetbox root that the dispatchers of
// an internal test share.
type testBundle struct {
	emu  *emulator.Server
	root string
}

// testConfig is the config every test starts from.
func testConfig() Config {
	return Config{Project: "proj", Location: "europe-west1", Queue: "default"}
}

// testQueue is the queue every test uses.
const testQueue = "projects/proj/locations/europe-west1/queues/default"

// emuBackend is the in-repo emulator with a helper that opens the official
// client on it. Tests that script the service's answers do it with fault
// rules (emulator.Faults), changed between calls with SetFaults.
type emuBackend struct{ *emulator.Server }

// startEmulator starts the in-repo emulator, store-only, with the test queue.
func startEmulator(t testing.TB) emuBackend {
	t.Helper()
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Queues: []emulator.QueueConfig{{Name: testQueue}}})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	return emuBackend{emu}
}

func (e emuBackend) client(t testing.TB) *ctapi.Client {
	t.Helper()
	c, err := e.NewClient(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// newDispatcher opens another dispatcher (its own processor UUID and outbox
// handle) on the bundle's server and outbox root.
func (b *testBundle) newDispatcher(t testing.TB, edit func(*Config)) (*Dispatcher, *parquetbox.Outbox, *sdkmetric.ManualReader) {
	t.Helper()
	ctx := context.Background()
	cfg := testConfig()
	reader := sdkmetric.NewManualReader()
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg.Client = emuBackend{b.emu}.client(t)
	if edit != nil {
		edit(&cfg)
	}
	box, err := parquetbox.Open(ctx, parquetbox.Config{Root: b.root, ProcessorUUID: uuid.Must(uuid.NewV7()), Clock: cfg.Clock})
	require.NoError(t, err)
	t.Cleanup(func() { box.Close() })
	d, err := NewDispatcher(ctx, box, &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	return d, box, reader
}

// settle waits until d has no work in flight: every answered call's
// records are then in the outbox.
func settle(d *Dispatcher) { <-d.flights.quiet() }

func request(run, task string, attempt uint64, body string) DispatchRequest {
	return DispatchRequest{
		RunID: run, TaskKey: task, Identity: naming.Attempt(attempt),
		Task: Task{URL: "https://worker.example/run", Body: []byte(body)},
	}
}

// slowCommitOutbox is an in-memory outbox that records at once but
// reports an outcome record (not a pending one) kept only when the test
// says so, like a group commit still syncing. It has only the Outbox
// methods, as a Parquet outbox, so the pending record goes through Append
// too.
type slowCommitOutbox struct {
	outbox.Outbox
	mu   sync.Mutex
	held []func(error)
	// holding hears of each outcome record held: the dispatcher appends
	// it after answering, so a test waits for it before releasing.
	holding chan struct{}
}

func (s *slowCommitOutbox) Append(ctx context.Context, r outbox.Record, done func(error)) error {
	if r.Status == outbox.StatusPending || done == nil {
		return s.Outbox.Append(ctx, r, done)
	}
	if err := s.Outbox.Append(ctx, r, nil); err != nil {
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
// and its flight stays until the record is: Close waits for the record,
// and a repeat meanwhile does not take the answer (another process may
// have cancelled the ID since): it waits for the record, then answers
// from the outbox, without a Cloud Tasks call.
func TestAnsweredFlightStaysUntilOutcomeWritten(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	box := &slowCommitOutbox{Outbox: outbox.NewMemory(clockwork.NewRealClock()), holding: make(chan struct{}, 1)}
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
	select {
	case <-box.holding:
	case <-time.After(30 * time.Second):
		t.Fatal("the outcome record was never appended")
	}

	type answer struct {
		res DispatchResult
		err error
	}
	repeat := make(chan answer, 1)
	go func() {
		res, err := d.Dispatch(ctx, req)
		repeat <- answer{res, err}
	}()
	impatient, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = d.Dispatch(impatient, req)
	var we *WaitError
	require.ErrorAs(t, err, &we, "a repeat waits for the record, not for the answer")
	box.release()
	got := <-repeat
	require.NoError(t, got.err)
	require.Equal(t, OutcomeAlreadyExisted, got.res.Outcome)
	require.True(t, got.res.Skipped, "answered from the record")
	require.Equal(t, 0, got.res.Calls)
	require.Equal(t, int64(1), Counter(t, reader, MetricCalls, attribute.String("method", "CreateTask")))

	// Close waits for an answered call's record.
	_, err = d.Dispatch(ctx, request("run1", "u", 1, "x"))
	require.NoError(t, err)
	<-box.holding
	closing, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorContains(t, d.Close(closing), "1 calls still in flight")
	box.release()
	settle(d)
	require.Equal(t, 0, d.flights.inFlight())
}

func TestRetryPolicyDelay(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.5}
	var full, jittered []time.Duration
	for n := 1; n <= 6; n++ {
		full = append(full, p.delay(n, 0))
		jittered = append(jittered, p.delay(n, 1))
	}
	require.Equal(t, []time.Duration{100e6, 200e6, 400e6, 800e6, 1e9, 1e9}, full)
	require.Equal(t, []time.Duration{50e6, 100e6, 200e6, 400e6, 500e6, 500e6}, jittered)
	// A policy that was not validated, with a multiplier timers.Backoff
	// refuses, waits Max.
	require.Equal(t, time.Second, RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: math.NaN()}.delay(1, 0))
}

func TestRetryWaitsOnTheClock(t *testing.T) {
	t.Parallel()
	// A fake clock is advanced by each wait: the calls are made at the
	// times the policy says, and the test does not move the clock.
	clock := clockwork.NewFakeClock()
	start := clock.Now()
	p := RetryPolicy{Initial: time.Second, Max: 4 * time.Second, Multiplier: 2, Jitter: 0, MaxCalls: 4}
	var at []time.Duration
	_, err := p.retry(context.Background(), clock, func() float64 { return 0 }, nil, func(context.Context, try) error {
		at = append(at, clock.Since(start))
		return status.Error(codes.Unavailable, "down")
	})
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.Equal(t, []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second}, at)

	// A permanent code stops at once; an ended context stops the retries.
	ctx, cancel := context.WithCancel(context.Background())
	calls2, err := p.retry(ctx, clock, func() float64 { return 0 }, nil, func(context.Context, try) error {
		cancel()
		return status.Error(codes.Unavailable, "down")
	})
	require.Equal(t, 1, calls2)
	require.Equal(t, codes.Unavailable, status.Code(err))
	calls3, err := p.retry(context.Background(), clock, func() float64 { return 0 }, nil, func(context.Context, try) error {
		return status.Error(codes.InvalidArgument, "bad")
	})
	require.Equal(t, 1, calls3)
	require.Equal(t, codes.InvalidArgument, status.Code(err))

	// MaxElapsed: after 1s the next wait (2s) would end past 2.5s, so the
	// loop stops at 2 calls.
	p.MaxElapsed = 2500 * time.Millisecond
	calls4, err := p.retry(context.Background(), clock, func() float64 { return 0 }, nil, func(context.Context, try) error {
		return status.Error(codes.Unavailable, "down")
	})
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.Equal(t, 2, calls4)
}

// A real clock is waited on: the sleep ends when its timer fires or the
// context ends.
func TestSleepOnARealClockEndsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, sleep(ctx, clockwork.NewRealClock(), time.Hour), context.Canceled)
	require.NoError(t, sleep(context.Background(), clockwork.NewRealClock(), time.Microsecond))
}

// transient names the codes whose calls are retried.
func TestTransient(t *testing.T) {
	t.Parallel()
	var got []codes.Code
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if transient(c) {
			got = append(got, c)
		}
	}
	require.Equal(t, []codes.Code{codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unavailable}, got)
}
