package cloudtasks_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

func TestDispatchCreatesThenSkips(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	b := w.open(t, nil)
	ctx := context.Background()
	req := request("run1", "extract", 1, `{"a":1,"b":2}`)

	first, err := b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "dispatch:run1:extract:1", first.ID)
	require.Equal(t, "projects/proj/locations/europe-west1/queues/default/tasks/"+first.CloudTaskID, first.TaskName)
	require.Equal(t, cloudtasks.OutcomeCreated, first.Outcome)
	require.Equal(t, 1, first.Calls)
	require.False(t, first.Skipped)

	// Same payload in another key order: the same request.
	req.Task.Body = []byte(`{"b":2, "a":1}`)
	second, err := b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeAlreadyExisted, second.Outcome)
	require.True(t, second.Skipped)
	require.Equal(t, 0, second.Calls)
	require.Equal(t, first.FirstRecorded, second.FirstRecorded)

	tasks := w.emu.Tasks(worldQueue)
	require.Len(t, tasks, 1)
	require.Equal(t, first.TaskName, tasks[0].GetName())
	hdr := tasks[0].GetHttpRequest().GetHeaders()
	require.Equal(t, "dispatch:run1:extract:1", hdr[cloudtasks.HeaderIdempotencyKey])
	require.Equal(t, first.CloudTaskID, hdr[cloudtasks.HeaderTaskID])

	recs := b.history(t, first.ID)
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusCreated}, statuses(recs))
	require.Equal(t, int32(1), recs[1].CreateCalls)
	require.Equal(t, naming.PayloadFingerprint(req.Task.Body), recs[1].PayloadSHA256)
	require.Equal(t, b.d.ProcessorUUID(), recs[1].ProcessorUUID)

	require.Equal(t, int64(1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricIdempotentSkips, attribute.String("kind", "dispatch")))
	require.Equal(t, int64(1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricOutcomes, attribute.String("outcome", "created")))
	require.Equal(t, int64(1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricOutcomes, attribute.String("outcome", "already_existed")))
	require.Equal(t, int64(1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricCalls, attribute.String("method", "CreateTask"), attribute.String("code", "OK")))
}

func TestDispatchPayloadConflict(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	b := w.open(t, nil)
	ctx := context.Background()
	_, err := b.d.Dispatch(ctx, request("run1", "extract", 1, `{"a":1}`))
	require.NoError(t, err)

	_, err = b.d.Dispatch(ctx, request("run1", "extract", 1, `{"a":2}`))
	require.ErrorIs(t, err, cloudtasks.ErrPayloadConflict)
	var ce *cloudtasks.ConflictError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "dispatch:run1:extract:1", ce.ID)
	require.Equal(t, naming.PayloadFingerprint([]byte(`{"a":1}`)), ce.Recorded)
	require.Equal(t, int64(1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricPayloadConflicts))
	require.Equal(t, int64(1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricCalls, attribute.String("method", "CreateTask")))
}

func TestDispatchAlreadyExistsIsSuccess(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	b := w.open(t, nil)
	ctx := context.Background()
	// Another dispatcher (its own outbox view is empty for this ID until it
	// reads the shared root) created the task first.
	other := w.open(t, nil).d
	_, err := other.Dispatch(ctx, request("run1", "extract", 1, "x"))
	require.NoError(t, err)

	res, err := b.d.Dispatch(ctx, request("run1", "extract", 2, "x"))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)

	// Wipe what the outbox knows by using a fresh root: the service answers.
	fresh := &world{emu: w.emu, clock: w.clock, root: t.TempDir()}
	d3 := fresh.open(t, nil)
	res, err = d3.d.Dispatch(ctx, request("run1", "extract", 1, "x"))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeAlreadyExisted, res.Outcome)
	require.False(t, res.Skipped)
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusAlreadyExisted}, statuses(d3.history(t, res.ID)))
}

func TestDispatchPermanentErrorThenRetry(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	b := w.open(t, nil)
	ctx := context.Background()
	require.NoError(t, w.emu.SetFaults(failAll("CreateTask", codes.PermissionDenied, false)))
	req := request("run1", "load", 1, "x")
	_, err := b.d.Dispatch(ctx, req)
	require.ErrorIs(t, err, cloudtasks.ErrCreateFailed)
	var ce *cloudtasks.CallError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, codes.PermissionDenied, ce.Code)
	require.Equal(t, 1, ce.Calls, "a permanent code is not retried")
	require.False(t, ce.Transient)
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	st, ok := status.FromError(err)
	require.True(t, ok)
	require.Equal(t, "CreateTask: injected fault", st.Message())
	require.Zero(t, w.emu.TaskCount())

	recs := b.history(t, "dispatch:run1:load:1")
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusFailed}, statuses(recs))
	require.Equal(t, "PermissionDenied", recs[1].ErrorCode)

	// A failed ID may be dispatched again, even with another payload.
	require.NoError(t, w.emu.SetFaults(emulator.Faults{}))
	req.Task.Body = []byte("y")
	res, err := b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)
	require.Equal(t, 1, res.Calls)
	recs = b.history(t, res.ID)
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusFailed, outbox.StatusPending, outbox.StatusCreated}, statuses(recs))
	require.Equal(t, int32(2), recs[3].CreateCalls)
	require.Equal(t, recs[0].CreatedAt, recs[3].CreatedAt)
	require.Equal(t, 1, w.emu.TaskCount())
	require.Equal(t, int64(1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricOutcomes, attribute.String("outcome", "failed")))
	require.Equal(t, int64(1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricCalls, attribute.String("method", "CreateTask"), attribute.String("code", "PermissionDenied")))
	require.Equal(t, int64(1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricCalls, attribute.String("method", "CreateTask"), attribute.String("code", "OK")))
}

// The first call of each task takes effect and its answer is lost
// (Unavailable for even attempts, DeadlineExceeded for odd ones); the fault
// plan is lifted before the retry, which meets AlreadyExists.
func TestDispatchCommitThenFail(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var retries []cloudtasks.RetryEvent
	w := newWorld(t)
	b := w.open(t, func(c *cloudtasks.Config) {
		c.Retry = fast(0)
		c.OnRetry = func(ev cloudtasks.RetryEvent) {
			if err := w.emu.SetFaults(emulator.Faults{}); err != nil {
				t.Error(err)
			}
			ev.Err = nil
			mu.Lock()
			retries = append(retries, ev)
			mu.Unlock()
		}
	})
	ctx := context.Background()
	var want []cloudtasks.RetryEvent
	for i := range 20 {
		code := codes.Unavailable
		if i%2 == 1 {
			code = codes.DeadlineExceeded
		}
		require.NoError(t, w.emu.SetFaults(failAll("CreateTask", code, true)))
		want = append(want, cloudtasks.RetryEvent{Method: "CreateTask", Call: 1, MaxCalls: cloudtasks.DefaultRetryMaxCalls, Code: code, Delay: 1})
		res, err := b.d.Dispatch(ctx, request("run1", "t", uint64(i), "x"))
		require.NoError(t, err)
		require.Equal(t, cloudtasks.OutcomeAlreadyExisted, res.Outcome)
		require.Equal(t, 2, res.Calls)
		recs := b.history(t, res.ID)
		require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusAlreadyExisted}, statuses(recs))
		require.Equal(t, int32(2), recs[1].CreateCalls)
	}
	require.Equal(t, want, retries)
	require.Equal(t, 20, w.emu.TaskCount())
	require.Empty(t, w.emu.RememberedNames())
	require.Equal(t, int64(10), cloudtasks.Counter(t, b.reader, cloudtasks.MetricCalls, attribute.String("code", "Unavailable")))
	require.Equal(t, int64(10), cloudtasks.Counter(t, b.reader, cloudtasks.MetricCalls, attribute.String("code", "DeadlineExceeded")))
	require.Equal(t, int64(20), cloudtasks.Counter(t, b.reader, cloudtasks.MetricCalls, attribute.String("code", "AlreadyExists")))
	require.Equal(t, int64(0), cloudtasks.Counter(t, b.reader, cloudtasks.MetricCalls, attribute.String("code", "OK")))
}

// The emulator's fault plan: half of all CreateTask calls take effect and
// then fail with Unavailable. Every dispatch still ends with one task and a
// record that says what the service answered.
func TestDispatchCommitThenFailEmulator(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	b := w.open(t, func(c *cloudtasks.Config) { c.Retry = fast(50) })
	require.NoError(t, w.emu.SetFaults(emulator.Faults{Seed: 7, Rules: []emulator.FaultRule{
		{Methods: []string{"CreateTask"}, Rate: 0.5, Code: codes.Unavailable, CommitThenFail: true},
	}}))
	ctx := context.Background()
	const n = 100
	got := map[cloudtasks.Outcome]int{}
	for i := range n {
		res, err := b.d.Dispatch(ctx, request("run1", "t", uint64(i), "x"))
		require.NoError(t, err)
		got[res.Outcome]++
		recs := b.history(t, res.ID)
		last := recs[len(recs)-1]
		require.Equal(t, int32(res.Calls), last.CreateCalls)
		if res.Calls == 1 {
			require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)
			require.Equal(t, outbox.StatusCreated, last.Status)
		} else {
			// The first call created the task; its answer was lost.
			require.Equal(t, cloudtasks.OutcomeAlreadyExisted, res.Outcome)
			require.Equal(t, outbox.StatusAlreadyExisted, last.Status)
		}
	}
	require.Equal(t, n, w.emu.TaskCount())
	require.Equal(t, n, got[cloudtasks.OutcomeCreated]+got[cloudtasks.OutcomeAlreadyExisted])
	require.NotZero(t, got[cloudtasks.OutcomeCreated])
	require.NotZero(t, got[cloudtasks.OutcomeAlreadyExisted])
}

func TestDispatchGivesUpWithinContext(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	b := w.open(t, func(c *cloudtasks.Config) { c.Retry = fast(3) })
	require.NoError(t, w.emu.SetFaults(failAll("CreateTask", codes.Unavailable, false)))
	_, err := b.d.Dispatch(context.Background(), request("run1", "t", 1, "x"))
	require.ErrorIs(t, err, cloudtasks.ErrGaveUp)
	require.Equal(t, codes.Unavailable, status.Code(err))
	var ce *cloudtasks.CallError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 3, ce.Calls)
	require.True(t, ce.Transient)
	require.Zero(t, w.emu.TaskCount())
	require.Equal(t, int64(3), cloudtasks.Counter(t, b.reader, cloudtasks.MetricCalls, attribute.String("method", "CreateTask"), attribute.String("code", "Unavailable")))
	// The outcome is unknown: the record stays pending for Recover.
	recs := b.history(t, "dispatch:run1:t:1")
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusPending}, statuses(recs))
	require.Equal(t, "Unavailable", recs[1].ErrorCode)
	require.Equal(t, int32(3), recs[1].CreateCalls)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = b.d.Dispatch(ctx, request("run1", "t", 2, "x"))
	require.ErrorIs(t, err, cloudtasks.ErrNotStarted)
	require.Equal(t, int64(3), cloudtasks.Counter(t, b.reader, cloudtasks.MetricCalls, attribute.String("method", "CreateTask")), "no call for an ended context")
}

// The thundering herd: many identical calls at once make one task, and one
// caller sees "created".
func TestDispatchThunderingHerd(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	b := w.open(t, nil)
	const n = 1000
	outcomes := herd(t, n, func(i int) (cloudtasks.DispatchResult, error) {
		return b.d.Dispatch(context.Background(), request("run1", "herd", 1, `{"k":"v"}`))
	})
	require.Equal(t, map[cloudtasks.Outcome]int{cloudtasks.OutcomeCreated: 1, cloudtasks.OutcomeAlreadyExisted: n - 1}, outcomes)
	require.Equal(t, 1, w.emu.TaskCount())
	require.Equal(t, int64(1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricCalls, attribute.String("method", "CreateTask"), attribute.String("code", "OK")))
	require.Equal(t, int64(1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricOutcomes, attribute.String("outcome", "created")))
	require.Equal(t, int64(n-1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricOutcomes, attribute.String("outcome", "already_existed")))
}

// Three dispatchers (three processors) share one outbox root and one server.
func TestDispatchThunderingHerdThreeDispatchers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	b := w.open(t, nil)
	ds := []*cloudtasks.Dispatcher{b.d}
	for range 2 {
		ds = append(ds, w.open(t, nil).d)
	}
	const n = 1000
	outcomes := herd(t, n, func(i int) (cloudtasks.DispatchResult, error) {
		return ds[i%3].Dispatch(context.Background(), request("run1", "herd3", 1, `{"k":"v"}`))
	})
	require.Equal(t, map[cloudtasks.Outcome]int{cloudtasks.OutcomeCreated: 1, cloudtasks.OutcomeAlreadyExisted: n - 1}, outcomes)
	require.Equal(t, 1, w.emu.TaskCount())
}
