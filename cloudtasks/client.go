package cloudtasks

import (
	"context"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
)

// Client is the part of the Cloud Tasks API the dispatcher calls. The
// official *ctapi.Client satisfies it; a test or a user may wrap one to
// observe or alter calls (see Config.Client).
type Client interface {
	// CreateTask creates a named task; ALREADY_EXISTS means the name is
	// taken (the task exists or ran within the name-reuse window).
	CreateTask(ctx context.Context, req *cloudtaskspb.CreateTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error)
	// GetTask reads a task; NOT_FOUND means it does not exist now.
	GetTask(ctx context.Context, req *cloudtaskspb.GetTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error)
	// DeleteTask deletes a task; NOT_FOUND means it was already gone.
	DeleteTask(ctx context.Context, req *cloudtaskspb.DeleteTaskRequest, opts ...gax.CallOption) error
	// BatchCreateTasks creates up to 100 tasks of one queue in one
	// long-running operation whose metadata lists the failed indexes.
	BatchCreateTasks(ctx context.Context, req *cloudtaskspb.BatchCreateTasksRequest, opts ...gax.CallOption) (*ctapi.BatchCreateTasksOperation, error)
}

var _ Client = (*ctapi.Client)(nil)
