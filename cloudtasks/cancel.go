package cloudtasks

import (
	"context"
	"errors"
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
	if id.IsZero() {
		return CancelResult{}, &RequestError{Field: "ID", Rule: "is the zero ID"}
	}
	if queue != "" && !queuePattern.MatchString(queue) {
		return CancelResult{}, &RequestError{Field: "Queue", Value: shorten(queue), Rule: "is not a queue ID; allowed: 1 to 100 of [A-Za-z0-9-]"}
	}
	key := id.String()
	if err := ctx.Err(); err != nil {
		return CancelResult{}, &WaitError{ID: key, Op: "cancel", Err: err}
	}
	f, _, err := d.flights.do(ctx, key, opCancel, func(f *flight) { d.cancel(ctx, f, id, queue) })
	switch {
	case errors.Is(err, ErrClosed):
		return CancelResult{}, err
	case err != nil:
		return CancelResult{}, &WaitError{ID: key, Op: "cancel", Err: err}
	}
	return f.cancelled, f.err
}

// cancel is the work of one cancel flight.
func (d *Dispatcher) cancel(leader context.Context, f *flight, id naming.ID, queue string) {
	ctx := workContext(leader)
	start := d.clock.Now()
	key := id.String()
	queuePath := d.queueOf(queue)
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
		f.err = &CallError{ID: key, Method: "DeleteTask", Code: code, Calls: calls, Transient: Transient(code), Err: err}
		return
	}
	prev, known, err := d.box.Latest(ctx, tableOf(id), key)
	if err == nil && !known && !res.Deleted {
		res.NotFound = true
		f.cancelled = res
		return
	}
	rec := baseRecord(id, queuePath)
	rec.Status = outbox.StatusCancelled
	if known {
		rec.CreatedAt, rec.CreateCalls, rec.PayloadSHA256 = prev.CreatedAt, prev.CreateCalls, prev.PayloadSHA256
	}
	if err := d.box.Append(ctx, rec); err != nil {
		d.outboxFailed(key, false, err)
		f.cancelled, f.err = res, fmt.Errorf("cloudtasks: %s: deleted but recording it failed: %w", key, err)
		return
	}
	d.m.outcome(ctx, id.Kind().String(), "cancelled", d.clock.Since(start))
	d.log.Debug("cancelled", "id", key, "deleted", res.Deleted)
	f.cancelled = res
}
