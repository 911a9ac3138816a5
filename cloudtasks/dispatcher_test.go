package cloudtasks

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

func request(run, task string, attempt uint64, body string) DispatchRequest {
	return DispatchRequest{
		RunID: run, TaskKey: task, Identity: naming.Attempt(attempt),
		Task: Task{URL: "https://worker.example/run", Body: []byte(body)},
	}
}

func TestDispatchCreatesThenSkips(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	req := request("run1", "extract", 1, `{"a":1,"b":2}`)

	first, err := b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "dispatch:run1:extract:1", first.ID)
	require.Equal(t, "projects/proj/locations/europe-west1/queues/default/tasks/"+first.CloudTaskID, first.TaskName)
	require.Equal(t, OutcomeCreated, first.Outcome)
	require.Equal(t, 1, first.Calls)
	require.False(t, first.Skipped)

	// Same payload in another key order: the same request.
	req.Task.Body = []byte(`{"b":2, "a":1}`)
	second, err := b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, OutcomeAlreadyExisted, second.Outcome)
	require.True(t, second.Skipped)
	require.Equal(t, 0, second.Calls)
	require.Equal(t, first.FirstRecorded, second.FirstRecorded)

	tasks := b.emu.Tasks(testQueue)
	require.Len(t, tasks, 1)
	require.Equal(t, first.TaskName, tasks[0].GetName())
	hdr := tasks[0].GetHttpRequest().GetHeaders()
	require.Equal(t, "dispatch:run1:extract:1", hdr[HeaderIdempotencyKey])
	require.Equal(t, first.CloudTaskID, hdr[HeaderTaskID])

	recs := history(t, b.box, first.ID)
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusCreated}, statuses(recs))
	require.Equal(t, int32(1), recs[1].CreateCalls)
	require.Equal(t, naming.PayloadFingerprint(req.Task.Body), recs[1].PayloadSHA256)
	require.Equal(t, b.d.ProcessorUUID(), recs[1].ProcessorUUID)

	require.Equal(t, int64(1), counter(t, b.reader, MetricIdempotentSkips, attribute.String("kind", "dispatch")))
	require.Equal(t, int64(1), counter(t, b.reader, MetricOutcomes, attribute.String("outcome", "created")))
	require.Equal(t, int64(1), counter(t, b.reader, MetricOutcomes, attribute.String("outcome", "already_existed")))
	require.Equal(t, int64(1), counter(t, b.reader, MetricCalls, attribute.String("method", "CreateTask"), attribute.String("code", "OK")))
}

func TestDispatchPayloadConflict(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	_, err := b.d.Dispatch(ctx, request("run1", "extract", 1, `{"a":1}`))
	require.NoError(t, err)

	_, err = b.d.Dispatch(ctx, request("run1", "extract", 1, `{"a":2}`))
	require.ErrorIs(t, err, ErrPayloadConflict)
	var ce *ConflictError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "dispatch:run1:extract:1", ce.ID)
	require.Equal(t, naming.PayloadFingerprint([]byte(`{"a":1}`)), ce.Recorded)
	require.Equal(t, int64(1), counter(t, b.reader, MetricPayloadConflicts))
	require.Equal(t, int64(1), counter(t, b.reader, MetricCalls, attribute.String("method", "CreateTask")))
}

func TestDispatchAlreadyExistsIsSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	// Another dispatcher (its own outbox view is empty for this ID until it
	// reads the shared root) created the task first.
	other, _, _ := b.newDispatcher(t, nil)
	_, err := other.Dispatch(ctx, request("run1", "extract", 1, "x"))
	require.NoError(t, err)

	res, err := b.d.Dispatch(ctx, request("run1", "extract", 2, "x"))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)

	// Wipe what the outbox knows by using a fresh root: the service answers.
	fresh := &testBundle{emu: b.emu, root: t.TempDir()}
	d3, box3, _ := fresh.newDispatcher(t, nil)
	res, err = d3.Dispatch(ctx, request("run1", "extract", 1, "x"))
	require.NoError(t, err)
	require.Equal(t, OutcomeAlreadyExisted, res.Outcome)
	require.False(t, res.Skipped)
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusAlreadyExisted}, statuses(history(t, box3, res.ID)))
}

// failAll is a fault plan under which every call of method fails with code;
// commit makes each call take effect first (the answer is lost).
func failAll(method string, code codes.Code, commit bool) emulator.Faults {
	return emulator.Faults{Rules: []emulator.FaultRule{{Methods: []string{method}, Rate: 1, Code: code, CommitThenFail: commit}}}
}

func TestDispatchPermanentErrorThenRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	require.NoError(t, b.emu.SetFaults(failAll("CreateTask", codes.PermissionDenied, false)))
	req := request("run1", "load", 1, "x")
	_, err := b.d.Dispatch(ctx, req)
	require.ErrorIs(t, err, ErrCreateFailed)
	var ce *CallError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, codes.PermissionDenied, ce.Code)
	require.Equal(t, 1, ce.Calls, "a permanent code is not retried")
	require.False(t, ce.Transient)
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	st, ok := status.FromError(err)
	require.True(t, ok)
	require.Equal(t, "CreateTask: injected fault", st.Message())
	require.Zero(t, b.emu.TaskCount())

	recs := history(t, b.box, "dispatch:run1:load:1")
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusFailed}, statuses(recs))
	require.Equal(t, "PermissionDenied", recs[1].ErrorCode)

	// A failed ID may be dispatched again, even with another payload.
	require.NoError(t, b.emu.SetFaults(emulator.Faults{}))
	req.Task.Body = []byte("y")
	res, err := b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.Equal(t, 1, res.Calls)
	recs = history(t, b.box, res.ID)
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusFailed, outbox.StatusPending, outbox.StatusCreated}, statuses(recs))
	require.Equal(t, int32(2), recs[3].CreateCalls)
	require.Equal(t, recs[0].CreatedAt, recs[3].CreatedAt)
	require.Equal(t, 1, b.emu.TaskCount())
	require.Equal(t, int64(1), counter(t, b.reader, MetricOutcomes, attribute.String("outcome", "failed")))
	require.Equal(t, int64(1), counter(t, b.reader, MetricCalls, attribute.String("method", "CreateTask"), attribute.String("code", "PermissionDenied")))
	require.Equal(t, int64(1), counter(t, b.reader, MetricCalls, attribute.String("method", "CreateTask"), attribute.String("code", "OK")))
}

// The first call of each task takes effect and its answer is lost
// (Unavailable for even attempts, DeadlineExceeded for odd ones); the fault
// plan is lifted before the retry, which meets AlreadyExists.
func TestDispatchCommitThenFail(t *testing.T) {
	t.Parallel()
	var emu *emulator.Server
	var mu sync.Mutex
	var retries []RetryEvent
	b := setup(t, func(c *Config) {
		c.Retry = RetryPolicy{Initial: 1, Max: 1, Jitter: -1}
		c.OnRetry = func(ev RetryEvent) {
			if err := emu.SetFaults(emulator.Faults{}); err != nil {
				t.Error(err)
			}
			ev.Err = nil
			mu.Lock()
			retries = append(retries, ev)
			mu.Unlock()
		}
	})
	emu = b.emu
	ctx := context.Background()
	var want []RetryEvent
	for i := range 20 {
		code := codes.Unavailable
		if i%2 == 1 {
			code = codes.DeadlineExceeded
		}
		require.NoError(t, emu.SetFaults(failAll("CreateTask", code, true)))
		want = append(want, RetryEvent{Method: "CreateTask", Call: 1, MaxCalls: DefaultRetryMaxCalls, Code: code, Delay: 1})
		res, err := b.d.Dispatch(ctx, request("run1", "t", uint64(i), "x"))
		require.NoError(t, err)
		require.Equal(t, OutcomeAlreadyExisted, res.Outcome)
		require.Equal(t, 2, res.Calls)
		recs := history(t, b.box, res.ID)
		require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusAlreadyExisted}, statuses(recs))
		require.Equal(t, int32(2), recs[1].CreateCalls)
	}
	require.Equal(t, want, retries)
	require.Equal(t, 20, b.emu.TaskCount())
	require.Empty(t, b.emu.RememberedNames())
	require.Equal(t, int64(10), counter(t, b.reader, MetricCalls, attribute.String("code", "Unavailable")))
	require.Equal(t, int64(10), counter(t, b.reader, MetricCalls, attribute.String("code", "DeadlineExceeded")))
	require.Equal(t, int64(20), counter(t, b.reader, MetricCalls, attribute.String("code", "AlreadyExists")))
	require.Equal(t, int64(0), counter(t, b.reader, MetricCalls, attribute.String("code", "OK")))
}

// The emulator's fault plan: half of all CreateTask calls take effect and
// then fail with Unavailable. Every dispatch still ends with one task and a
// record that says what the service answered.
func TestDispatchCommitThenFailEmulator(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Retry = RetryPolicy{Initial: 1, Max: 1, Jitter: -1, MaxCalls: 50} })
	require.NoError(t, b.emu.SetFaults(emulator.Faults{Seed: 7, Rules: []emulator.FaultRule{
		{Methods: []string{"CreateTask"}, Rate: 0.5, Code: codes.Unavailable, CommitThenFail: true},
	}}))
	ctx := context.Background()
	const n = 100
	got := map[Outcome]int{}
	for i := range n {
		res, err := b.d.Dispatch(ctx, request("run1", "t", uint64(i), "x"))
		require.NoError(t, err)
		got[res.Outcome]++
		recs := history(t, b.box, res.ID)
		last := recs[len(recs)-1]
		require.Equal(t, int32(res.Calls), last.CreateCalls)
		if res.Calls == 1 {
			require.Equal(t, OutcomeCreated, res.Outcome)
			require.Equal(t, outbox.StatusCreated, last.Status)
		} else {
			// The first call created the task; its answer was lost.
			require.Equal(t, OutcomeAlreadyExisted, res.Outcome)
			require.Equal(t, outbox.StatusAlreadyExisted, last.Status)
		}
	}
	require.Equal(t, n, b.emu.TaskCount())
	require.Equal(t, n, got[OutcomeCreated]+got[OutcomeAlreadyExisted])
	require.NotZero(t, got[OutcomeCreated])
	require.NotZero(t, got[OutcomeAlreadyExisted])
}

func TestDispatchGivesUpWithinContext(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Retry = RetryPolicy{Initial: 1, Max: 1, Jitter: -1, MaxCalls: 3} })
	require.NoError(t, b.emu.SetFaults(failAll("CreateTask", codes.Unavailable, false)))
	_, err := b.d.Dispatch(context.Background(), request("run1", "t", 1, "x"))
	require.ErrorIs(t, err, ErrGaveUp)
	require.Equal(t, codes.Unavailable, status.Code(err))
	var ce *CallError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 3, ce.Calls)
	require.True(t, ce.Transient)
	require.Zero(t, b.emu.TaskCount())
	require.Equal(t, int64(3), counter(t, b.reader, MetricCalls, attribute.String("method", "CreateTask"), attribute.String("code", "Unavailable")))
	// The outcome is unknown: the record stays pending for Recover.
	recs := history(t, b.box, "dispatch:run1:t:1")
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusPending}, statuses(recs))
	require.Equal(t, "Unavailable", recs[1].ErrorCode)
	require.Equal(t, int32(3), recs[1].CreateCalls)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = b.d.Dispatch(ctx, request("run1", "t", 2, "x"))
	require.ErrorIs(t, err, ErrNotStarted)
	require.Equal(t, int64(3), counter(t, b.reader, MetricCalls, attribute.String("method", "CreateTask")), "no call for an ended context")
}

// The thundering herd: many identical calls at once make one task, and one
// caller sees "created".
func TestDispatchThunderingHerd(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const n = 1000
	outcomes := herd(t, n, func(i int) (DispatchResult, error) {
		return b.d.Dispatch(context.Background(), request("run1", "herd", 1, `{"k":"v"}`))
	})
	require.Equal(t, map[Outcome]int{OutcomeCreated: 1, OutcomeAlreadyExisted: n - 1}, outcomes)
	require.Equal(t, 1, b.emu.TaskCount())
	require.Equal(t, int64(1), counter(t, b.reader, MetricCalls, attribute.String("method", "CreateTask"), attribute.String("code", "OK")))
	require.Equal(t, int64(1), counter(t, b.reader, MetricOutcomes, attribute.String("outcome", "created")))
	require.Equal(t, int64(n-1), counter(t, b.reader, MetricOutcomes, attribute.String("outcome", "already_existed")))
}

// Three dispatchers (three processors) share one outbox root and one server.
func TestDispatchThunderingHerdThreeDispatchers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ds := []*Dispatcher{b.d}
	for range 2 {
		d, _, _ := b.newDispatcher(t, nil)
		ds = append(ds, d)
	}
	const n = 1000
	outcomes := herd(t, n, func(i int) (DispatchResult, error) {
		return ds[i%3].Dispatch(context.Background(), request("run1", "herd3", 1, `{"k":"v"}`))
	})
	require.Equal(t, map[Outcome]int{OutcomeCreated: 1, OutcomeAlreadyExisted: n - 1}, outcomes)
	require.Equal(t, 1, b.emu.TaskCount())
}

func herd(t *testing.T, n int, call func(i int) (DispatchResult, error)) map[Outcome]int {
	t.Helper()
	start := make(chan struct{})
	var mu sync.Mutex
	outcomes := map[Outcome]int{}
	var errs []error
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			res, err := call(i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			outcomes[res.Outcome]++
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return outcomes
}
