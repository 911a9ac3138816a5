package emulator_test

import (
	"context"
	"testing"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestEmptyRequestsNeverCrash sends every RPC an empty request through the
// raw stubs (the official client would refuse some of them itself): each
// answers with a status, never a panic.
func TestEmptyRequestsNeverCrash(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn, err := grpc.NewClient(b.srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := cloudtaskspb.NewCloudTasksClient(conn)
	ops := longrunningpb.NewOperationsClient(conn)
	ctx := context.Background()
	calls := map[string]func() error{
		"ListQueues":  func() error { _, err := c.ListQueues(ctx, &cloudtaskspb.ListQueuesRequest{}); return err },
		"GetQueue":    func() error { _, err := c.GetQueue(ctx, &cloudtaskspb.GetQueueRequest{}); return err },
		"CreateQueue": func() error { _, err := c.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{}); return err },
		"CreateQueueNoQueue": func() error {
			_, err := c.CreateQueue(ctx, &cloudtaskspb.CreateQueueRequest{Parent: loc})
			return err
		},
		"UpdateQueue": func() error { _, err := c.UpdateQueue(ctx, &cloudtaskspb.UpdateQueueRequest{}); return err },
		"DeleteQueue": func() error { _, err := c.DeleteQueue(ctx, &cloudtaskspb.DeleteQueueRequest{}); return err },
		"PurgeQueue":  func() error { _, err := c.PurgeQueue(ctx, &cloudtaskspb.PurgeQueueRequest{}); return err },
		"PauseQueue":  func() error { _, err := c.PauseQueue(ctx, &cloudtaskspb.PauseQueueRequest{}); return err },
		"ResumeQueue": func() error { _, err := c.ResumeQueue(ctx, &cloudtaskspb.ResumeQueueRequest{}); return err },
		"ListTasks":   func() error { _, err := c.ListTasks(ctx, &cloudtaskspb.ListTasksRequest{}); return err },
		"GetTask":     func() error { _, err := c.GetTask(ctx, &cloudtaskspb.GetTaskRequest{}); return err },
		"CreateTask":  func() error { _, err := c.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{}); return err },
		"CreateTaskNoTask": func() error {
			_, err := c.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: queue})
			return err
		},
		"BatchCreateTasks": func() error {
			_, err := c.BatchCreateTasks(ctx, &cloudtaskspb.BatchCreateTasksRequest{})
			return err
		},
		"BatchCreateTasksNilTask": func() error {
			_, err := c.BatchCreateTasks(ctx, &cloudtaskspb.BatchCreateTasksRequest{Parent: queue, Requests: []*cloudtaskspb.CreateTaskRequest{{Parent: queue}}})
			return err
		},
		"DeleteTask": func() error { _, err := c.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{}); return err },
		"BatchDeleteTasks": func() error {
			_, err := c.BatchDeleteTasks(ctx, &cloudtaskspb.BatchDeleteTasksRequest{})
			return err
		},
		"RunTask":         func() error { _, err := c.RunTask(ctx, &cloudtaskspb.RunTaskRequest{}); return err },
		"GetIamPolicy":    func() error { _, err := c.GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{}); return err },
		"GetCmekConfig":   func() error { _, err := c.GetCmekConfig(ctx, &cloudtaskspb.GetCmekConfigRequest{}); return err },
		"GetOperation":    func() error { _, err := ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{}); return err },
		"ListOperations":  func() error { _, err := ops.ListOperations(ctx, &longrunningpb.ListOperationsRequest{}); return err },
		"DeleteOperation": func() error { _, err := ops.DeleteOperation(ctx, &longrunningpb.DeleteOperationRequest{}); return err },
		"CancelOperation": func() error { _, err := ops.CancelOperation(ctx, &longrunningpb.CancelOperationRequest{}); return err },
		"WaitOperation":   func() error { _, err := ops.WaitOperation(ctx, &longrunningpb.WaitOperationRequest{}); return err },
	}
	allowed := map[codes.Code]bool{codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true, codes.Unimplemented: true}
	for name, call := range calls {
		code := status.Code(call())
		require.True(t, allowed[code], "%s answered %s", name, code)
	}
}
