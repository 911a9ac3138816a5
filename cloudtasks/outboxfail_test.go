package cloudtasks

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ctdispatch/ctdispatch/outbox"
)

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
