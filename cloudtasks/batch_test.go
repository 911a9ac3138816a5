package cloudtasks

import (
	"context"
	"runtime"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
)

// queued waits until n calls wait for the next batch of the test queue.
func queued(t *testing.T, d *Dispatcher, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d.batches.mu.Lock()
		q := d.batches.queues[testQueue]
		got := 0
		if q != nil {
			got = len(q.waiting)
		}
		d.batches.mu.Unlock()
		if got == n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d calls waiting for a batch, want %d", got, n)
		runtime.Gosched()
	}
}

// badIndex makes the request at one index of every batch invalid, so the
// service fails that index alone.
type badIndex struct {
	Client
	index int
}

func (c badIndex) BatchCreateTasks(ctx context.Context, req *cloudtaskspb.BatchCreateTasksRequest, opts ...gax.CallOption) (*ctapi.BatchCreateTasksOperation, error) {
	if c.index < len(req.Requests) {
		req.Requests[c.index].Task.Name = req.Parent + "/tasks/bad name"
	}
	return c.Client.BatchCreateTasks(ctx, req, opts...)
}

// The first call goes alone as CreateTask; the calls that arrive while it
// is in flight share one BatchCreateTasks request, and each gets its own
// outcome: created, already_existed for a name taken before, or its own
// permanent error.
func TestBatchEachCallItsOwnOutcome(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	client := emu.client(t)
	gate := NewGate(badIndex{Client: client, index: 7}, "CreateTask")
	b := &testBundle{emu: emu.Server, root: t.TempDir()}
	d, _, reader := b.newDispatcher(t, func(c *Config) { c.Client, c.Batch = gate, true })
	ctx := context.Background()
	// Task 3's name is taken already.
	taken := request("run1", "t", 3, "x")
	id, err := taken.ID()
	require.NoError(t, err)
	_, err = client.CreateTask(ctx, taken.Task.createRequest(id, testQueue, time.Now()))
	require.NoError(t, err)

	first := dispatchAsync(ctx, d, request("run1", "t", 0, "x"))
	gate.Reached(t)
	var rest []<-chan answer
	for i := 1; i <= 50; i++ {
		rest = append(rest, dispatchAsync(ctx, d, request("run1", "t", uint64(i), "x")))
	}
	queued(t, d, 50)
	close(gate.Open)
	require.NoError(t, receive(t, first, "the first call").err)
	got := map[Outcome]int{}
	var failed []string
	for _, ch := range rest {
		a := receive(t, ch, "a batched call")
		if a.err != nil {
			require.ErrorIs(t, a.err, ErrCreateFailed)
			require.Equal(t, codes.InvalidArgument, codeOf(a.err))
			var ce *CallError
			require.ErrorAs(t, a.err, &ce)
			failed = append(failed, ce.ID)
			continue
		}
		got[a.res.Outcome]++
	}
	require.Equal(t, map[Outcome]int{OutcomeCreated: 48, OutcomeAlreadyExisted: 1}, got)
	require.Len(t, failed, 1)
	require.Equal(t, int64(1), Counter(t, reader, MetricCalls, attribute.String("method", "CreateTask")))
	require.Equal(t, int64(1), Counter(t, reader, MetricCalls, attribute.String("method", "BatchCreateTasks")))
	require.Equal(t, 50, emu.TaskCount())
}

// slowBatch makes every BatchCreateTasks request take an hour on a fake
// clock, so the window a shared request's callers get to come back is an
// hour whatever the machine's speed.
// slowBatch stands for a service whose BatchCreateTasks takes half a
// second: the window in which answered callers gather again is that round
// trip, in real time, and the callers come back well within it.
type slowBatch struct{ Client }

func (c slowBatch) BatchCreateTasks(ctx context.Context, req *cloudtaskspb.BatchCreateTasksRequest, opts ...gax.CallOption) (*ctapi.BatchCreateTasksOperation, error) {
	time.Sleep(500 * time.Millisecond) // latency, not synchronisation
	return c.Client.BatchCreateTasks(ctx, req, opts...)
}

// The callers a shared request answered come back one by one with their
// next calls: they gather into one request again, instead of the first
// going alone as CreateTask and the rest waiting a round trip behind it.
func TestBatchAnsweredCallersGatherAgain(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	gate := NewGate(slowBatch{Client: emu.client(t)}, "CreateTask")
	b := &testBundle{emu: emu.Server, root: t.TempDir()}
	d, _, reader := b.newDispatcher(t, func(c *Config) { c.Client, c.Batch = gate, true })
	ctx := context.Background()

	first := dispatchAsync(ctx, d, request("run1", "t", 0, "x"))
	gate.Reached(t)
	const n = 10
	var herd []<-chan answer
	for i := 1; i <= n; i++ {
		herd = append(herd, dispatchAsync(ctx, d, request("run1", "t", uint64(i), "x")))
	}
	queued(t, d, n)
	close(gate.Open)
	require.NoError(t, receive(t, first, "the first call").err)
	var next []<-chan answer
	for i, ch := range herd {
		a := receive(t, ch, "a call of the first batch")
		require.NoError(t, a.err)
		require.Equal(t, OutcomeCreated, a.res.Outcome)
		next = append(next, dispatchAsync(ctx, d, request("run1", "t", uint64(n+1+i), "x")))
	}
	for _, ch := range next {
		a := receive(t, ch, "a call of the second batch")
		require.NoError(t, a.err)
		require.Equal(t, OutcomeCreated, a.res.Outcome)
	}
	require.Equal(t, int64(1), Counter(t, reader, MetricCalls, attribute.String("method", "CreateTask")))
	require.Equal(t, int64(2), Counter(t, reader, MetricCalls, attribute.String("method", "BatchCreateTasks")))
	require.Equal(t, 2*n+1, emu.TaskCount())
}

// answer is one call's result, sent from the goroutine that made it.
type answer struct {
	res DispatchResult
	err error
}

func dispatchAsync(ctx context.Context, d *Dispatcher, req DispatchRequest) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		res, err := d.Dispatch(ctx, req)
		ch <- answer{res, err}
	}()
	return ch
}

// receive returns the answer, failing the test instead of hanging when a
// call that should have returned is stuck.
func receive(t *testing.T, ch <-chan answer, what string) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return", what)
		return answer{}
	}
}
