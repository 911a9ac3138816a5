package emulator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

func TestCommitThenFail(t *testing.T) {
	t.Parallel()
	for _, code := range []codes.Code{codes.Unavailable, codes.DeadlineExceeded} {
		t.Run(code.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *emulator.Config) {
				c.DisableDelivery = true
				c.Faults = emulator.Faults{Rules: []emulator.FaultRule{{Methods: []string{"CreateTask"}, Rate: 1, Code: code, CommitThenFail: true}}}
			})
			ctx := context.Background()
			name := queue + "/tasks/d_commit"
			_, err := b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask(name)})
			requireCode(t, err, code, "injected fault after the call took effect")
			require.Len(t, b.srv.Tasks(queue), 1, "the task was created although the caller saw an error")

			require.NoError(t, b.srv.SetFaults(emulator.Faults{}))
			_, err = b.client.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask(name)})
			requireCode(t, err, codes.AlreadyExists, "already exists")
		})
	}
}

func TestFaultsBeforeCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) {
		c.DisableDelivery = true
		c.Faults = emulator.Faults{Rules: []emulator.FaultRule{{Methods: []string{"CreateTask"}, Rate: 1, Code: codes.ResourceExhausted}}}
	})
	_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask(queue + "/tasks/x")})
	requireCode(t, err, codes.ResourceExhausted, "injected fault")
	require.Empty(t, b.srv.Tasks(queue), "a plain fault leaves nothing behind")
	_, err = b.client.GetQueue(context.Background(), &cloudtaskspb.GetQueueRequest{Name: queue})
	require.NoError(t, err, "other methods are not affected")
}

// outcomes returns the codes of n GetQueue calls.
func outcomes(t *testing.T, b *testBundle, n int) []codes.Code {
	t.Helper()
	out := make([]codes.Code, n)
	for i := range out {
		_, err := b.client.GetQueue(context.Background(), &cloudtaskspb.GetQueueRequest{Name: queue})
		out[i] = status.Code(err)
	}
	return out
}

func TestFaultsAreDeterministicBySeed(t *testing.T) {
	t.Parallel()
	faults := func(seed uint64) emulator.Faults {
		return emulator.Faults{Seed: seed, Rules: []emulator.FaultRule{
			{Methods: []string{"GetQueue"}, Rate: 0.5, Code: codes.Aborted}, // not retried by the client
			{Rate: 0.2, Code: codes.Internal},
		}}
	}
	a := setup(t, func(c *emulator.Config) { c.DisableDelivery = true; c.Faults = faults(7) })
	b := setup(t, func(c *emulator.Config) { c.DisableDelivery = true; c.Faults = faults(7) })
	first := outcomes(t, a, 40)
	// Calls of another method in between do not shift GetQueue's decisions.
	for range 5 {
		_, _ = b.client.GetTask(context.Background(), &cloudtaskspb.GetTaskRequest{Name: queue + "/tasks/x"})
	}
	require.Equal(t, first, outcomes(t, b, 40))
	require.Contains(t, first, codes.Aborted)
	require.Contains(t, first, codes.OK)

	require.NoError(t, a.srv.SetFaults(faults(8)))
	require.NotEqual(t, first, outcomes(t, a, 40), "another seed, other decisions")
	require.NoError(t, a.srv.SetFaults(faults(7)))
	require.Equal(t, first, outcomes(t, a, 40), "SetFaults restarts the streams")
}

// batchOutcome sends one BatchCreateTasks call for the IDs and returns the
// created task IDs and the code of each failed index.
func batchOutcome(t *testing.T, b *testBundle, ids ...string) (created []string, failed map[int32]codes.Code) {
	t.Helper()
	ctx := context.Background()
	req := &cloudtaskspb.BatchCreateTasksRequest{Parent: queue}
	for _, id := range ids {
		req.Requests = append(req.Requests, &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask(queue + "/tasks/" + id)})
	}
	op, err := b.client.BatchCreateTasks(ctx, req)
	require.NoError(t, err, "a per-request fault never fails the call")
	resp, err := op.Wait(ctx)
	require.NoError(t, err)
	for _, tk := range resp.Tasks {
		created = append(created, strings.TrimPrefix(tk.Name, queue+"/tasks/"))
	}
	meta, err := op.Metadata()
	require.NoError(t, err)
	failed = make(map[int32]codes.Code)
	for i, st := range meta.FailedRequests {
		failed[i] = codes.Code(st.Code)
	}
	return created, failed
}

func TestPerRequestBatchFaults(t *testing.T) {
	t.Parallel()
	rule := func(commit bool) emulator.Faults {
		return emulator.Faults{Seed: 3, Rules: []emulator.FaultRule{{Methods: []string{"BatchCreateTasks", "BatchDeleteTasks"}, Rate: 1, Code: codes.Unavailable, CommitThenFail: commit, PerRequest: true}}}
	}
	for _, tt := range []struct {
		name   string
		commit bool
		stored int
	}{
		{"before commit", false, 0},
		{"after commit", true, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *emulator.Config) { c.DisableDelivery = true; c.Faults = rule(tt.commit) })
			created, failed := batchOutcome(t, b, "a", "b")
			require.Empty(t, created, "a failed request is never listed as created")
			require.Equal(t, map[int32]codes.Code{0: codes.Unavailable, 1: codes.Unavailable}, failed)
			require.Len(t, b.srv.Tasks(queue), tt.stored, "with commit the tasks exist although their requests were reported failed")
			_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: httpTask(queue + "/tasks/c")})
			require.NoError(t, err, "CreateTask is not a batch: the rule leaves it alone")
			require.NoError(t, b.srv.SetFaults(emulator.Faults{}))
			_, failed = batchOutcome(t, b, "a", "b")
			if tt.commit {
				require.Equal(t, map[int32]codes.Code{0: codes.AlreadyExists, 1: codes.AlreadyExists}, failed)
			} else {
				require.Empty(t, failed)
			}
		})
	}
	t.Run("only some requests, the same ones for a seed", func(t *testing.T) {
		t.Parallel()
		half := emulator.Faults{Seed: 11, Rules: []emulator.FaultRule{{Methods: []string{"BatchCreateTasks"}, Rate: 0.5, Code: codes.Unavailable, PerRequest: true}}}
		ids := make([]string, 40)
		for i := range ids {
			ids[i] = fmt.Sprintf("t%02d", i)
		}
		a := setup(t, func(c *emulator.Config) { c.DisableDelivery = true; c.Faults = half })
		b := setup(t, func(c *emulator.Config) { c.DisableDelivery = true; c.Faults = half })
		createdA, failedA := batchOutcome(t, a, ids...)
		createdB, failedB := batchOutcome(t, b, ids...)
		require.Equal(t, failedA, failedB)
		require.Equal(t, createdA, createdB)
		require.Len(t, createdA, 40-len(failedA))
		require.NotEmpty(t, createdA)
		require.NotEmpty(t, failedA)
		for i := range failedA {
			require.NotContains(t, createdA, ids[i])
		}
	})
}
