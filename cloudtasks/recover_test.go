package cloudtasks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// leavePending makes b.d give up on an ID with Unavailable, so its record
// stays pending, and returns the ID.
func leavePending(t *testing.T, b *testBundle, task string) string {
	t.Helper()
	require.NoError(t, b.emu.SetFaults(failAll("CreateTask", codes.Unavailable, false)))
	_, err := b.d.Dispatch(context.Background(), request("run1", task, 1, "x"))
	require.ErrorIs(t, err, ErrGaveUp)
	require.NoError(t, b.emu.SetFaults(emulator.Faults{}))
	settle(b.d) // the record is written before the test moves the clock
	return "dispatch:run1:" + task + ":1"
}

func TestDispatchFinishesStalePendingAsRecovered(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	fast := func(c *Config) { c.Clock, c.Retry = clock, RetryPolicy{Initial: 1, Max: 1, Jitter: -1, MaxCalls: 1} }
	b := setup(t, fast)
	leavePending(t, b, "a")
	other, box2, reader2 := b.newDispatcher(t, fast)

	// Not stale yet: a plain outcome, no hand-over counted.
	res, err := other.Dispatch(context.Background(), request("run1", "a", 1, "x"))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.Equal(t, int64(0), counter(t, reader2, MetricHandovers))

	id2 := leavePending(t, b, "b")
	clock.Advance(2 * DefaultStaleAfter)
	res, err = other.Dispatch(context.Background(), request("run1", "b", 1, "x"))
	require.NoError(t, err)
	require.Equal(t, OutcomeRecovered, res.Outcome)
	require.Equal(t, int64(1), counter(t, reader2, MetricHandovers))
	require.Equal(t, int64(1), counter(t, reader2, MetricOutcomes, attribute.String("outcome", "recovered")))
	recs := history(t, box2, id2)
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusPending, outbox.StatusPending, outbox.StatusCreated}, statuses(recs))
	require.Equal(t, b.d.ProcessorUUID(), recs[1].ProcessorUUID)
	require.Equal(t, other.ProcessorUUID(), recs[3].ProcessorUUID)
	require.Equal(t, int32(2), recs[3].CreateCalls)
}

func TestRecoverOwnershipAndNotFound(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	fast := func(c *Config) { c.Clock, c.Retry = clock, RetryPolicy{Initial: 1, Max: 1, Jitter: -1, MaxCalls: 1} }
	b := setup(t, fast)
	id := leavePending(t, b, "a")
	clock.Advance(2 * DefaultStaleAfter)

	strict, _, _ := b.newDispatcher(t, func(c *Config) { fast(c); c.EnforceOwnership = true })
	st, err := strict.Recover(context.Background())
	require.NoError(t, err)
	require.Equal(t, RecoverStats{Stale: 1, SkippedNotOwned: 1}, st)
	_, err = strict.Dispatch(context.Background(), request("run1", "a", 1, "x"))
	require.ErrorIs(t, err, ErrNotOwner)
	var oe *OwnershipError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, b.d.ProcessorUUID(), oe.Owner)

	// The owner itself may recover its own record under enforcement; the
	// task was never created, so the record becomes not_found.
	st, err = b.d.Recover(context.Background())
	require.NoError(t, err)
	require.Equal(t, RecoverStats{Stale: 1, NotFound: 1}, st)
	recs := history(t, b.box, id)
	last := recs[len(recs)-1]
	require.Equal(t, outbox.StatusNotFound, last.Status)
	require.Equal(t, "NotFound", last.ErrorCode)
	require.Equal(t, int64(1), counter(t, b.reader, MetricRecoveries, attribute.String("result", "not_found")))

	// A not_found ID may be dispatched again.
	res, err := b.d.Dispatch(context.Background(), request("run1", "a", 1, "x"))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func TestLogsCarryIDAndNoPayload(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	var emu *emulator.Server
	b := setup(t, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.Retry = RetryPolicy{Initial: 1, Max: 1, Jitter: -1, MaxCalls: 2} // 1ns waits on the real clock
		// The first call takes effect and its answer is lost; the retry
		// meets AlreadyExists.
		c.OnRetry = func(RetryEvent) {
			if err := emu.SetFaults(emulator.Faults{}); err != nil {
				t.Error(err)
			}
		}
	})
	emu = b.emu
	ctx := context.Background()
	req := request("run1", "a", 1, `{"secret":"BODY-SECRET"}`)
	req.Task.Headers = map[string]string{"X-Api-Key": "HEADER-SECRET"}
	require.NoError(t, emu.SetFaults(failAll("CreateTask", codes.Unavailable, true)))
	res, err := b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, OutcomeAlreadyExisted, res.Outcome)
	require.Equal(t, 2, res.Calls)
	res, err = b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Skipped)
	req.Task.Body = []byte(`{"secret":"OTHER"}`)
	_, err = b.d.Dispatch(ctx, req)
	require.ErrorIs(t, err, ErrPayloadConflict)

	out := logs.b.String()
	require.NotContains(t, out, "SECRET")
	require.NotContains(t, out, "OTHER")
	sc := bufio.NewScanner(&logs.b)
	lines := 0
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		require.Equal(t, "dispatch:run1:a:1", line["id"], "line %s", sc.Text())
		lines++
	}
	require.GreaterOrEqual(t, lines, 3)
}

// blockingClient holds CreateTask until release is closed.
type blockingClient struct {
	Client
	entered chan struct{}
	release chan struct{}
}

func (c blockingClient) CreateTask(ctx context.Context, req *cloudtaskspb.CreateTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error) {
	c.entered <- struct{}{}
	<-c.release
	return c.Client.CreateTask(ctx, req, opts...)
}

// A call with another payload while the first is in flight is a conflict.
func TestDispatchConcurrentDifferentPayload(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	bc := blockingClient{Client: emu.client(t), entered: make(chan struct{}, 1), release: make(chan struct{})}
	cfg := testConfig()
	cfg.Client = bc
	d, err := NewDispatcher(context.Background(), outbox.NewMemory(nil), &cfg)
	require.NoError(t, err)
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		res, err := d.Dispatch(ctx, request("run1", "a", 1, `{"v":1}`))
		if err == nil && res.Outcome != OutcomeCreated {
			err = fmt.Errorf("outcome %s", res.Outcome)
		}
		first <- err
	}()
	<-bc.entered
	second := make(chan error, 1)
	go func() {
		_, err := d.Dispatch(ctx, request("run1", "a", 1, `{"v":2}`))
		second <- err
	}()
	// Whether the second call joins the flight or comes after it and reads
	// the record, the answer is the same.
	close(bc.release)
	require.ErrorIs(t, <-second, ErrPayloadConflict)
	require.NoError(t, <-first)
	require.Equal(t, 1, emu.TaskCount())
}
