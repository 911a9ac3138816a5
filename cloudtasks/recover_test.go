package cloudtasks_test

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
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// leavePending makes p give up on a dispatch with Unavailable, so its
// record stays pending, and returns the ID.
func (p *proc) leavePending(t *testing.T, w *world, task string) string {
	t.Helper()
	require.NoError(t, w.emu.SetFaults(failAll("CreateTask", codes.Unavailable, false)))
	_, err := p.d.Dispatch(context.Background(), request("run1", task, 1, "x"))
	require.ErrorIs(t, err, cloudtasks.ErrGaveUp)
	require.NoError(t, w.emu.SetFaults(emulator.Faults{}))
	p.settle(t) // the record is written before the test moves the clock
	return "dispatch:run1:" + task + ":1"
}

// A pending record left by another processor is finished by a repeat of
// the call: as a plain outcome while it is fresh, as recovered (and a
// hand-over) once it is stale.
func TestDispatchFinishesStalePendingAsRecovered(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	once := func(c *cloudtasks.Config) { c.Retry = fast(1) }
	b := w.open(t, once)
	b.leavePending(t, w, "a")
	other := w.open(t, once)

	// Not stale yet: a plain outcome, no hand-over counted.
	res, err := other.d.Dispatch(context.Background(), request("run1", "a", 1, "x"))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)
	require.Equal(t, int64(0), cloudtasks.Counter(t, other.reader, cloudtasks.MetricHandovers))

	id2 := b.leavePending(t, w, "b")
	w.clock.Advance(2 * cloudtasks.DefaultStaleAfter)
	res, err = other.d.Dispatch(context.Background(), request("run1", "b", 1, "x"))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeRecovered, res.Outcome)
	require.Equal(t, int64(1), cloudtasks.Counter(t, other.reader, cloudtasks.MetricHandovers))
	require.Equal(t, int64(1), cloudtasks.Counter(t, other.reader, cloudtasks.MetricOutcomes, attribute.String("outcome", "recovered")))
	recs := other.history(t, id2)
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusPending, outbox.StatusPending, outbox.StatusCreated}, statuses(recs))
	require.Equal(t, b.d.ProcessorUUID(), recs[1].ProcessorUUID)
	require.Equal(t, other.d.ProcessorUUID(), recs[3].ProcessorUUID)
	require.Equal(t, int32(2), recs[3].CreateCalls)
}

// Under EnforceOwnership a processor leaves other processors' pending
// records alone, in Recover and in Dispatch, and finishes its own.
func TestRecoverOwnershipAndNotFound(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	enforce := func(c *cloudtasks.Config) { c.Retry, c.EnforceOwnership = fast(1), true }
	b := w.open(t, enforce)
	id := b.leavePending(t, w, "a")
	w.clock.Advance(2 * cloudtasks.DefaultStaleAfter)

	strict := w.open(t, enforce)
	st, err := strict.d.Recover(context.Background())
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RecoverStats{Stale: 1, SkippedNotOwned: 1}, st)
	_, err = strict.d.Dispatch(context.Background(), request("run1", "a", 1, "x"))
	require.ErrorIs(t, err, cloudtasks.ErrNotOwner)
	var oe *cloudtasks.OwnershipError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, cloudtasks.OwnershipError{ID: id, Owner: b.d.ProcessorUUID()}, *oe)
	require.Zero(t, cloudtasks.Counter(t, strict.reader, cloudtasks.MetricCalls))

	// The owner recovers its own record; the task was never created, so
	// the record becomes not_found.
	st, err = b.d.Recover(context.Background())
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RecoverStats{Stale: 1, NotFound: 1}, st)
	recs := b.history(t, id)
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusPending, outbox.StatusNotFound}, statuses(recs))
	require.Equal(t, "NotFound", recs[2].ErrorCode)
	require.Equal(t, int64(1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricRecoveries, attribute.String("result", "not_found")))

	// A not_found ID may be dispatched again.
	res, err := b.d.Dispatch(context.Background(), request("run1", "a", 1, "x"))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)
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
	w := newWorld(t)
	b := w.open(t, func(c *cloudtasks.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.Retry = fast(2)
		// The first call takes effect and its answer is lost; the retry
		// meets AlreadyExists.
		c.OnRetry = func(cloudtasks.RetryEvent) {
			if err := w.emu.SetFaults(emulator.Faults{}); err != nil {
				t.Error(err)
			}
		}
	})
	ctx := context.Background()
	req := request("run1", "a", 1, `{"secret":"BODY-SECRET"}`)
	req.Task.Headers = map[string]string{"X-Api-Key": "HEADER-SECRET"}
	require.NoError(t, w.emu.SetFaults(failAll("CreateTask", codes.Unavailable, true)))
	res, err := b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeAlreadyExisted, res.Outcome)
	require.Equal(t, 2, res.Calls)
	res, err = b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Skipped)
	req.Task.Body = []byte(`{"secret":"OTHER"}`)
	_, err = b.d.Dispatch(ctx, req)
	require.ErrorIs(t, err, cloudtasks.ErrPayloadConflict)
	b.settle(t) // nothing logs any more

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
	cloudtasks.Client
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
	emu := startEmulator(t, nil)
	client, err := emu.NewClient(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	bc := blockingClient{Client: client, entered: make(chan struct{}, 1), release: make(chan struct{})}
	cfg := cloudtasks.Config{Project: "proj", Location: "europe-west1", Queue: "default", Client: bc}
	d, err := cloudtasks.NewDispatcher(context.Background(), outbox.NewMemory(nil), &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		res, err := d.Dispatch(ctx, request("run1", "a", 1, `{"v":1}`))
		if err == nil && res.Outcome != cloudtasks.OutcomeCreated {
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
	require.ErrorIs(t, <-second, cloudtasks.ErrPayloadConflict)
	require.NoError(t, <-first)
	require.Equal(t, 1, emu.TaskCount())
}
