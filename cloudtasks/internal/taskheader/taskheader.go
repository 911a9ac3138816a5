// Package taskheader names the HTTP request headers a task carries to its
// worker, once for the three packages that speak them: the dispatcher sets
// IdempotencyKey and TaskID on every task it creates, the emulator sets
// the X-CloudTasks-* ones as Cloud Tasks does when it delivers, and the
// worker reads them all. The public names (cloudtasks.HeaderTaskID,
// worker.HeaderTaskName and the rest) are these constants.
package taskheader

// The headers the dispatcher sets on every task it creates.
const (
	// IdempotencyKey carries the task's internal ID, so that a worker can
	// deduplicate its deliveries.
	IdempotencyKey = "Idempotency-Key"
	// TaskID carries the task's Cloud Tasks ID (d_… or t_…) as the
	// dispatcher computed it.
	TaskID = "X-Ctdispatch-Task-Id"
)

// The headers Cloud Tasks sets on each delivery.
const (
	// QueueName carries the queue's ID.
	QueueName = "X-CloudTasks-QueueName"
	// TaskName carries the task's ID (not its full resource name).
	TaskName = "X-CloudTasks-TaskName"
	// RetryCount counts the task's earlier attempts.
	RetryCount = "X-CloudTasks-TaskRetryCount"
	// ExecutionCount counts the earlier attempts answered with anything
	// but 5xx.
	ExecutionCount = "X-CloudTasks-TaskExecutionCount"
	// ETA carries the task's schedule time in fractional seconds since the
	// Unix epoch.
	ETA = "X-CloudTasks-TaskETA"
	// PreviousResponse carries the HTTP status the previous attempt got.
	PreviousResponse = "X-CloudTasks-TaskPreviousResponse"
	// RetryReason says why the task is retried.
	RetryReason = "X-CloudTasks-TaskRetryReason"
)
