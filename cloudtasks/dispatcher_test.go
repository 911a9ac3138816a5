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
	fresh := &testBundle{be: b.be, root: t.TempDir()}
	d3, box3, _ := fresh.newDispatcher(t, nil)
	res, err = d3.Dispatch(ctx, request("run1", "extract", 1, "x"))
	require.NoError(t, err)
	require.Equal(t, OutcomeAlreadyExisted, res.Outcome)
	require.False(t, res.Skipped)
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusAlreadyExisted}, statuses(history(t, box3, res.ID)))
}

func TestDispatchPermanentErrorThenRetry(t *testing.T) {
	t.Parallel()
	b := setupFake(t, nil)
	ctx := context.Background()
	b.fake.setFault(func(method string, n int) (error, bool) {
		if n == 1 {
			return status.Error(codes.PermissionDenied, "no"), false
		}
		return nil, true
	})
	req := request("run1", "load", 1, "x")
	_, err := b.d.Dispatch(ctx, req)
	require.ErrorIs(t, err, ErrCreateFailed)
	var ce *CallError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, codes.PermissionDenied, ce.Code)
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	st, ok := status.FromError(err)
	require.True(t, ok)
	require.Equal(t, "no", st.Message())

	recs := history(t, b.box, "dispatch:run1:load:1")
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusFailed}, statuses(recs))
	require.Equal(t, "PermissionDenied", recs[1].ErrorCode)

	// A failed ID may be dispatched again, even with another payload.
	req.Task.Body = []byte("y")
	res, err := b.d.Dispatch(ctx, req)
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	recs = history(t, b.box, res.ID)
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusFailed, outbox.StatusPending, outbox.StatusCreated}, statuses(recs))
	require.Equal(t, int32(2), recs[3].CreateCalls)
	require.Equal(t, recs[0].CreatedAt, recs[3].CreatedAt)
	require.Equal(t, int64(1), counter(t, b.reader, MetricOutcomes, attribute.String("outcome", "failed")))
}

func TestDispatchCommitThenFail(t *testing.T) {
	t.Parallel()
	b := setupFake(t, func(c *Config) { c.Retry = RetryPolicy{Initial: 1, Max: 1, Jitter: -1} })
	ctx := context.Background()
	// Every first call of a task commits and then answers Unavailable or
	// DeadlineExceeded; the repeat gets AlreadyExists.
	b.fake.setFault(func(method string, n int) (error, bool) {
		if method == "CreateTask" && n%2 == 1 {
			code := codes.Unavailable
			if n%4 == 3 {
				code = codes.DeadlineExceeded
			}
			return status.Error(code, "lost answer"), true
		}
		return nil, true
	})
	for i := range 20 {
		res, err := b.d.Dispatch(ctx, request("run1", "t", uint64(i), "x"))
		require.NoError(t, err)
		require.Equal(t, OutcomeAlreadyExisted, res.Outcome)
		require.Equal(t, 2, res.Calls)
		recs := history(t, b.box, res.ID)
		require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusAlreadyExisted}, statuses(recs))
		require.Equal(t, int32(2), recs[1].CreateCalls)
	}
	stored, created := b.be.counts()
	require.Equal(t, 20, stored)
	require.Equal(t, 20, created)
	require.Equal(t, int64(10), counter(t, b.reader, MetricCalls, attribute.String("code", "Unavailable")))
	require.Equal(t, int64(10), counter(t, b.reader, MetricCalls, attribute.String("code", "DeadlineExceeded")))
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
	b := setupFake(t, func(c *Config) { c.Retry = RetryPolicy{Initial: 1, Max: 1, Jitter: -1, MaxCalls: 3} })
	b.fake.setFault(func(string, int) (error, bool) { return status.Error(codes.Unavailable, "down"), false })
	_, err := b.d.Dispatch(context.Background(), request("run1", "t", 1, "x"))
	require.ErrorIs(t, err, ErrGaveUp)
	require.Equal(t, codes.Unavailable, status.Code(err))
	var ce *CallError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 3, ce.Calls)
	// The outcome is unknown: the record stays pending for Recover.
	recs := history(t, b.box, "dispatch:run1:t:1")
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusPending}, statuses(recs))
	require.Equal(t, "Unavailable", recs[1].ErrorCode)
	require.Equal(t, int32(3), recs[1].CreateCalls)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = b.d.Dispatch(ctx, request("run1", "t", 2, "x"))
	require.Error(t, err)
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
	stored, created := b.be.counts()
	require.Equal(t, 1, stored)
	require.Equal(t, 1, created)
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
	stored, created := b.be.counts()
	require.Equal(t, 1, stored)
	require.Equal(t, 1, created)
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
