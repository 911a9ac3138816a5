package cloudtasks

import (
	"context"
	"fmt"
	"math/rand/v2"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// CancelResult is the answer to Cancel.
type CancelResult struct {
	// ID is the internal ID.
	ID string
	// CloudTaskID is the Cloud Tasks task ID.
	CloudTaskID string
	// TaskName is the full task resource name.
	TaskName string
	// Deleted is true when this call deleted the task, false when it was
	// already gone (fired, deleted before, or never created).
	Deleted bool
	// NotFound is true when neither Cloud Tasks nor the outbox knows the ID
	// (a mistyped ID, say): nothing was recorded.
	NotFound bool
}

// Cancel deletes the task named by id from queue (empty: the default queue)
// and records it as cancelled. A task that is already gone is a success.
// Transient errors are retried like CreateTask's.
func (d *Dispatcher) Cancel(ctx context.Context, id naming.ID, queue string) (CancelResult, error) {
	if d.closed.Load() {
		return CancelResult{}, ErrClosed
	}
	if id.IsZero() {
		return CancelResult{}, &RequestError{Field: "ID", Rule: "is the zero ID"}
	}
	if queue != "" && !queuePattern.MatchString(queue) {
		return CancelResult{}, &RequestError{Field: "Queue", Value: shorten(queue), Rule: "is not a queue ID; allowed: 1 to 100 of [A-Za-z0-9-]"}
	}
	start := d.clock.Now()
	key := id.String()
	queuePath := d.QueuePath(queue)
	res := CancelResult{ID: key, CloudTaskID: id.CloudTaskID(), TaskName: queuePath + "/tasks/" + id.CloudTaskID()}
	calls, err := d.cfg.Retry.retry(ctx, d.clock, rand.Float64, d.onRetry("DeleteTask"), func(ctx context.Context) error {
		err := d.client.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: res.TaskName})
		d.m.call(ctx, "DeleteTask", codeOf(err))
		return err
	})
	code := codeOf(err)
	switch {
	case err == nil:
		res.Deleted = true
	case code == codes.NotFound:
	default:
		d.m.outcome(ctx, id.Kind().String(), "cancel_failed", d.clock.Since(start))
		d.log.Warn("DeleteTask failed", "id", key, "code", code.String(), "calls", calls)
		return CancelResult{}, &CallError{ID: key, Method: "DeleteTask", Code: code, Calls: calls, Transient: Transient(code), Err: err}
	}
	prev, known, err := d.box.Latest(ctx, tableOf(id), key)
	if err == nil && !known && !res.Deleted {
		res.NotFound = true
		return res, nil
	}
	rec := outbox.Record{
		Table: tableOf(id), ID: key, CloudTaskID: id.CloudTaskID(), Queue: queuePath,
		RunID: id.RunID(), TaskKey: id.TaskKey(), Attempt: id.Attempt(), Kind: id.Kind().String(),
		Status: outbox.StatusCancelled,
	}
	if id.IsTimer() {
		rec.DueAt = id.Time()
	}
	if known {
		rec.CreatedAt, rec.CreateCalls, rec.PayloadSHA256 = prev.CreatedAt, prev.CreateCalls, prev.PayloadSHA256
	}
	if err := d.box.Append(context.WithoutCancel(ctx), rec); err != nil {
		return res, fmt.Errorf("cloudtasks: %s: deleted but recording it failed: %w", key, err)
	}
	d.m.outcome(ctx, id.Kind().String(), "cancelled", d.clock.Since(start))
	d.log.Debug("cancelled", "id", key, "deleted", res.Deleted)
	return res, nil
}
