package cloudtasks_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// Batching as a user meets it; the tests that hold calls at the moment a
// batch forms are internal (batch_test.go).
//
// These dispatchers run on the real clock: the window in which answered
// callers gather again is a timer on Config.Clock, which a fake clock fires
// only when something advances it, and a herd's callers do not come back.

// batched turns batching on, on the real clock.
func batched(c *cloudtasks.Config) {
	c.Batch, c.Clock = true, clockwork.NewRealClock()
}

// 1,000 identical concurrent calls under batching: one task, one created.
func TestBatchThunderingHerd(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	b := w.open(t, batched)
	const n = 1000
	outcomes := herd(t, n, func(int) (cloudtasks.DispatchResult, error) {
		return b.d.Dispatch(context.Background(), request("run1", "herd", 1, `{"k":"v"}`))
	})
	require.Equal(t, map[cloudtasks.Outcome]int{cloudtasks.OutcomeCreated: 1, cloudtasks.OutcomeAlreadyExisted: n - 1}, outcomes)
	require.Equal(t, 1, w.emu.TaskCount())
	require.Equal(t, int64(1), cloudtasks.Counter(t, b.reader, cloudtasks.MetricOutcomes, attribute.String("outcome", "created")))
}

// Distinct concurrent calls while half of the batch requests commit and
// then fail: each caller retries alone, and every ID ends with one task.
func TestBatchCommitThenFail(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	b := w.open(t, func(c *cloudtasks.Config) { batched(c); c.Retry = fast(50) })
	require.NoError(t, w.emu.SetFaults(emulator.Faults{Seed: 3, Rules: []emulator.FaultRule{
		{Methods: []string{"BatchCreateTasks", "CreateTask"}, Rate: 0.5, Code: codes.Unavailable, CommitThenFail: true},
	}}))
	const n = 300
	outcomes := herd(t, n, func(i int) (cloudtasks.DispatchResult, error) {
		return b.d.Dispatch(context.Background(), request("run1", "t", uint64(i), "x"))
	})
	require.Equal(t, n, outcomes[cloudtasks.OutcomeCreated]+outcomes[cloudtasks.OutcomeAlreadyExisted])
	require.Equal(t, n, w.emu.TaskCount())
}

// A service without BatchCreateTasks: calls fall back to CreateTask, and
// the log says so once.
func TestBatchFallsBackWhenUnimplemented(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	w := newWorld(t)
	b := w.open(t, func(c *cloudtasks.Config) {
		batched(c)
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	require.NoError(t, w.emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{
		{Methods: []string{"BatchCreateTasks"}, Rate: 1, Code: codes.Unimplemented},
	}}))
	const n = 300
	outcomes := herd(t, n, func(i int) (cloudtasks.DispatchResult, error) {
		return b.d.Dispatch(context.Background(), request("run1", "t", uint64(i), "x"))
	})
	require.Equal(t, map[cloudtasks.Outcome]int{cloudtasks.OutcomeCreated: n}, outcomes)
	require.Equal(t, n, w.emu.TaskCount())
	b.settle(t) // nothing logs any more
	require.Equal(t, 1, strings.Count(logs.b.String(), "batching off"))
}
