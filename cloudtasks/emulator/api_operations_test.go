package emulator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// Time budget for this file: about a second (a handful of emulators on a
// fake clock).

// batchOp sends one BatchCreateTasks call of one task with this ID and
// request ID, and returns the operation's name and the failed requests'
// codes.
func batchOp(t *testing.T, b *testBundle, id, requestID string) (name string, failed map[int32]codes.Code) {
	t.Helper()
	op, err := b.client.BatchCreateTasks(context.Background(), &cloudtaskspb.BatchCreateTasksRequest{
		Parent: queue, RequestId: requestID,
		Requests: []*cloudtaskspb.CreateTaskRequest{{Parent: queue, Task: httpTask(queue + "/tasks/" + id)}},
	})
	require.NoError(t, err)
	meta, err := op.Metadata()
	require.NoError(t, err)
	failed = map[int32]codes.Code{}
	for i, st := range meta.GetFailedRequests() {
		failed[i] = codes.Code(st.GetCode())
	}
	return op.Name(), failed
}

// getOp fetches an operation by name through the client's operations
// client, as BatchCreateTasksOperation.Poll does.
func getOp(b *testBundle, name string) error {
	_, err := b.client.LROClient.GetOperation(context.Background(), &longrunningpb.GetOperationRequest{Name: name})
	return err
}

// listOps lists the names of every operation the emulator holds.
func listOps(t *testing.T, b *testBundle) []string {
	t.Helper()
	it := b.client.LROClient.ListOperations(context.Background(), &longrunningpb.ListOperationsRequest{Name: loc + "/operations"})
	var names []string
	for {
		op, err := it.Next()
		if err == iterator.Done {
			return names
		}
		require.NoError(t, err)
		names = append(names, op.GetName())
	}
}

func TestFinishedOperationsExpireAfterRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) { c.DisableDelivery = true })
	first, failed := batchOp(t, b, "a", "req-1")
	require.Empty(t, failed)

	// Up to the last moment of the default hour, the operation is kept and
	// its request ID answers a repeated call with it.
	b.clock.Advance(emulator.DefaultOperationRetention - time.Nanosecond)
	require.NoError(t, getOp(b, first))
	again, failed := batchOp(t, b, "a", "req-1")
	require.Equal(t, first, again, "the same request ID answers with the same operation")
	require.Empty(t, failed)

	// Then both are forgotten: NotFound, and the request ID runs anew
	// (meeting the task it created the first time).
	b.clock.Advance(time.Nanosecond)
	requireCode(t, getOp(b, first), codes.NotFound, "operation "+first+" does not exist")
	third, failed := batchOp(t, b, "a", "req-1")
	require.NotEqual(t, first, third)
	require.Equal(t, map[int32]codes.Code{0: codes.AlreadyExists}, failed)
}

func TestFinishedOperationsAreBoundedInNumber(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *emulator.Config) { c.DisableDelivery = true; c.OperationLimit = 2 })
	var names []string
	for i := range 3 {
		name, failed := batchOp(t, b, fmt.Sprint("t", i), fmt.Sprint("req-", i))
		require.Empty(t, failed)
		names = append(names, name)
	}
	requireCode(t, getOp(b, names[0]), codes.NotFound, "does not exist")
	require.NoError(t, getOp(b, names[1]))
	require.NoError(t, getOp(b, names[2]))
	require.ElementsMatch(t, names[1:], listOps(t, b), "the emulator holds the newest two, no more")
	again, failed := batchOp(t, b, "t0", "req-0")
	require.NotEqual(t, names[0], again, "the oldest request ID was forgotten with its operation")
	require.Equal(t, map[int32]codes.Code{0: codes.AlreadyExists}, failed)
	requireCode(t, getOp(b, names[1]), codes.NotFound, "does not exist")
}

func TestOperationBoundsAreValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  emulator.Config
		want string
	}{
		{emulator.Config{OperationRetention: -time.Second}, `emulator: Config.OperationRetention "-1s" must not be negative`},
		{emulator.Config{OperationLimit: -1}, `emulator: Config.OperationLimit "-1" must not be negative`},
	} {
		_, err := emulator.New(tc.cfg)
		require.ErrorIs(t, err, emulator.ErrInvalidConfig)
		require.EqualError(t, err, tc.want)
	}
}
