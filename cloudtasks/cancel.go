package cloudtasks

import (
	"context"
	"errors"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// CancelOutcome says what a Cancel found.
type CancelOutcome string

// The outcomes of Cancel.
const (
	// CancelDeleted means this call deleted the task. Cloud Tasks then
	// holds its name for a while (Config.NameHold): the same ID dispatched
	// again meanwhile gets ErrNameHeld.
	CancelDeleted CancelOutcome = "deleted"
	// CancelAlreadyGone means the outbox knows the ID but its task no
	// longer exists: it fired, was deleted before, or was never created.
	CancelAlreadyGone CancelOutcome = "already_gone"
	// CancelUnknown means neither the outbox nor Cloud Tasks knows the ID
	// (a mistyped ID, say): nothing was deleted or recorded.
	CancelUnknown CancelOutcome = "unknown"
	// CancelQueued is CancelTx's answer: the cancel is recorded in the
	// caller's transaction, and a relay deletes the task once that
	// transaction commits.
	CancelQueued CancelOutcome = "queued"
)

// CancelResult is the answer to Cancel and CancelTimer.
type CancelResult struct {
	// ID is the internal ID.
	ID string
	// CloudTaskID is the Cloud Tasks task ID.
	CloudTaskID string
	// TaskName is the full task resource name the delete went to.
	TaskName string
	// Outcome says what happened.
	Outcome CancelOutcome
}

// CancelTimer cancels a timer: Cancel for a timer ID
// (timer:retry:… or timer:heartbeat:…).
func (d *Dispatcher) CancelTimer(ctx context.Context, timerID, queue string) (CancelResult, error) {
	id, err := parseID("TimerID", timerID)
	if err != nil {
		return CancelResult{}, err
	}
	if !id.IsTimer() {
		return CancelResult{}, &RequestError{Field: "TimerID", Value: shorten(timerID),
			Rule: `is not a timer ID; allowed: "timer:retry:…" or "timer:heartbeat:…" (Cancel takes any ID)`}
	}
	return d.cancelID(ctx, id, queue)
}

// Cancel deletes the task of an internal ID (a dispatch or a timer) and
// records the ID as cancelled. The task is deleted from the queue the
// outbox recorded for the ID, and, on a store where processes can write an
// ID's first record blind of each other (outbox.FreshReader, the Parquet
// store), from any other queue the ID's records name: processes with
// different default queues may each have created it. queue may be empty,
// and when given must name the recorded queue. An ID the outbox does not know needs queue: the outbox
// cannot say where its task is. A task that is already gone is a success
// (CancelAlreadyGone). Transient errors are retried like CreateTask's.
//
// Errors: *RequestError before any call (a malformed ID, a queue that
// differs from the record or is missing); *CallError (ErrCancelFailed)
// when DeleteTask failed; *WaitError when ctx ended first.
func (d *Dispatcher) Cancel(ctx context.Context, id, queue string) (CancelResult, error) {
	nid, err := parseID("ID", id)
	if err != nil {
		return CancelResult{}, err
	}
	return d.cancelID(ctx, nid, queue)
}

// parseID reads an internal ID given in the request field field.
func parseID(field, s string) (naming.ID, error) {
	id, err := naming.Parse(s)
	if err != nil {
		return naming.ID{}, &RequestError{Field: field, Value: shorten(s), Rule: err.Error(), Err: err}
	}
	return id, nil
}

func (d *Dispatcher) cancelID(ctx context.Context, id naming.ID, queue string) (CancelResult, error) {
	if queue != "" && !queuePattern.MatchString(queue) {
		return CancelResult{}, &RequestError{Field: "Queue", Value: shorten(queue), Rule: "is not a queue ID; allowed: 1 to 100 of [A-Za-z0-9-]"}
	}
	key := id.String()
	if err := ctx.Err(); err != nil {
		return CancelResult{}, &WaitError{ID: key, Op: "cancel", Err: err}
	}
	ctx, span := d.startCancel(ctx, id)
	res, err := d.cancelFlight(ctx, id, queue)
	endCancel(span, &res, err)
	return res, err
}

// cancelFlight leads or joins the cancel flight of id.
func (d *Dispatcher) cancelFlight(ctx context.Context, id naming.ID, queue string) (CancelResult, error) {
	key := id.String()
	f, how, err := d.flights.do(ctx, key, opCancel, func(f *flight) { d.cancel(ctx, f, id, queue) })
	switch {
	case errors.Is(err, ErrClosed):
		return CancelResult{}, err
	case err != nil:
		return CancelResult{}, &WaitError{ID: key, Op: "cancel", Started: f != nil, Err: err}
	}
	res := f.cancelled
	if how != ledFlight {
		linkLeader(ctx, f)
		if res.Outcome == CancelDeleted {
			// Another call's delete answered this one: this call deleted
			// nothing, and found the task gone.
			res.Outcome = CancelAlreadyGone
		}
	}
	return res, f.err
}

// cancel is the work of one cancel flight.
func (d *Dispatcher) cancel(leader context.Context, f *flight, id naming.ID, queue string) {
	ctx := workContext(leader)
	f.span = trace.SpanContextFromContext(ctx)
	start := d.clock.Now()
	key := id.String()
	prev, known, err := d.latestForCancel(ctx, id)
	if errors.Is(err, outbox.ErrConcurrentWrites) {
		err = nil // the delete does not depend on which blind write was last; its record follows both
	}
	if err != nil {
		f.err = &OutboxError{ID: key, Op: OpRead, BeforeCall: true, Err: err}
		return
	}
	queuePath, err := cancelQueue(key, &prev, known, queue, d.queueOf)
	if err != nil {
		f.err = err
		return
	}
	res := CancelResult{ID: key, CloudTaskID: id.CloudTaskID(), TaskName: id.TaskName(queuePath)}
	calls, err := d.deleteTask(ctx, res.TaskName)
	code := codeOf(err)
	if known && (err == nil || code == codes.NotFound) {
		// Processes with different default queues that wrote the ID's
		// first record blind of each other each created its task in their
		// own queue (docs/consistency.md): the cancel deletes every one.
		deleted, n, oerr := d.deleteInOtherQueues(ctx, id, queuePath)
		calls += n
		switch {
		case oerr != nil:
			err, code = oerr, codeOf(oerr)
		case deleted && err != nil:
			err, code = nil, codes.OK
		}
	}
	v := onDelete(err, known, &prev)
	if v.failed {
		d.m.outcome(ctx, id.Kind().String(), "cancel_failed", d.clock.Since(start))
		d.log.WarnContext(ctx, "DeleteTask failed", "id", key, "code", code.String(), "calls", calls)
		f.err = &CallError{ID: key, Method: "DeleteTask", Code: code, Calls: calls, Transient: transient(code), Err: err}
		return
	}
	res.Outcome = v.outcome
	if !v.record {
		f.cancelled = res
		return
	}
	rec := recordOf(id, queuePath)
	rec.Status = outbox.StatusCancelled
	traceIDs(ctx, &rec)
	if res.Outcome == CancelAlreadyGone {
		rec.ErrorCode = codes.NotFound.String()
	}
	if known {
		rec.CreateCalls, rec.PayloadSHA256 = prev.CreateCalls, prev.PayloadSHA256
	}
	if err := d.recordCancel(ctx, rec, prev, known); err != nil {
		d.outboxFailed(key, false, err)
		f.cancelled, f.err = res, &OutboxError{ID: key, Op: OpRecordCancel, Err: err}
		return
	}
	d.m.outcome(ctx, id.Kind().String(), "cancelled", d.clock.Since(start))
	d.log.DebugContext(ctx, "cancelled", "id", key, "outcome", res.Outcome)
	f.cancelled = res
}

// cancelRereads bounds how often a cancel's record follows a record
// another process wrote first. It is higher than a create's bound: the
// delete is made, so the record must land after whatever won, and each try
// is one append; processes that cancel and schedule one ID in a loop can
// take several versions in a row.
const cancelRereads = 16

// recordCancel appends rec, a cancel, as the version after prev (when
// known). Should another process have recorded the ID meanwhile, the
// cancel is recorded after the winner's record: the delete was made after
// that record was read, and the newest state must say so.
func (d *Dispatcher) recordCancel(ctx context.Context, rec, prev outbox.Record, known bool) error {
	for i := 0; ; i++ {
		if known {
			rec.Follow(&prev, d.clock.Now())
		} else {
			rec.Follow(nil, d.clock.Now())
		}
		err := outbox.AppendAndWait(ctx, d.box, rec)
		var vc *outbox.VersionConflictError
		if !errors.As(err, &vc) || i == cancelRereads {
			return err
		}
		prev, known = vc.Current, true
		if prev.Version < rec.Version {
			// The store answered with a record older than the one that
			// refused ours (read before the winner committed): read the
			// ID again, or the next try is refused the same way.
			if cur, ok, err := d.box.Latest(ctx, rec.Table, rec.ID); ok && (err == nil || errors.Is(err, outbox.ErrConcurrentWrites)) && cur.Version >= rec.Version {
				prev = cur
			}
		}
	}
}

// nameHeld decides whether an ALREADY_EXISTS answered to the create call
// of an ID whose latest record before the call was prev means that the
// name is held after a Cancel deleted its task, and if so sets f's error.
// The cancel's time is that of the newest record of a delete in the ID's
// history (the first after any pending, held-name or found-nothing cancel
// record; when
// compaction has folded the history, prev's own time, which is later, so
// the estimate errs long).
func (d *Dispatcher) nameHeld(ctx context.Context, f *flight, prev *outbox.Record, now time.Time) bool {
	if prev.Status != outbox.StatusPending && prev.Status != outbox.StatusCancelled {
		return false
	}
	cancelled, ok := time.Time{}, false
	if prev.Status == outbox.StatusCancelled && prev.ErrorCode == "" {
		cancelled, ok = prev.UpdatedAt, true
	} else {
		hist, err := d.box.Lookup(ctx, outbox.Query{Table: prev.Table, ID: prev.ID, History: true})
		if err == nil {
			for i := len(hist) - 1; i >= 0; i-- {
				r := &hist[i]
				// A cancel that found no task (NOT_FOUND, say while another
				// process's create was pending) changes nothing about a name
				// an earlier cancel's delete left held.
				if r.Status == outbox.StatusPending || (r.Status == outbox.StatusCancelled && r.ErrorCode != "") {
					continue
				}
				cancelled, ok = r.UpdatedAt, deletedByCancel(r)
				if !ok {
					// A delete written blind beside this record (the same
					// version, another process) is not undone by it.
					for j := range hist {
						if o := &hist[j]; o.Version > 0 && o.Version == r.Version && o.Status == outbox.StatusCancelled && o.ErrorCode == "" {
							cancelled, ok = o.UpdatedAt, true
						}
					}
				}
				break
			}
		}
		if !ok && deletedByCancel(prev) {
			cancelled, ok = prev.UpdatedAt, true
		}
	}
	until := cancelled.Add(d.cfg.NameHold)
	if !ok || !now.Before(until) {
		return false
	}
	f.err = &NameHeldError{ID: prev.ID, CancelledAt: cancelled, HeldUntil: until}
	d.log.InfoContext(ctx, "name held after a cancel", "id", prev.ID, "held_until", until)
	return true
}

// latestForCancel reads the ID's newest record as fresh as the store
// allows (outbox.FreshReader): a cancel must find every queue the ID's
// records name, also in records another process wrote since this one
// last looked.
func (d *Dispatcher) latestForCancel(ctx context.Context, id naming.ID) (outbox.Record, bool, error) {
	t, key := outbox.TableOf(id), id.String()
	if d.fresh != nil {
		prev, found, _, err := d.fresh.LatestFresh(ctx, t, key)
		return prev, found, err
	}
	return d.box.Latest(ctx, t, key)
}

// deleteTask deletes the task named name, retrying transient errors as
// CreateTask's are. It returns the calls made and the last error
// (NotFound when the task is gone).
func (d *Dispatcher) deleteTask(ctx context.Context, name string) (int, error) {
	return d.call(ctx, "DeleteTask", codes.NotFound, func(ctx context.Context) error {
		err := d.client.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: name})
		d.m.call(ctx, "DeleteTask", codeOf(err))
		return err
	})
}

// deleteInOtherQueues deletes id's task in every queue other than queue
// that a record of id names. Only a store that can hold blind writes
// (outbox.FreshReader: the Parquet store) can name two; on others it
// reads nothing. deleted reports whether another queue held the task; err
// is the first failure other than NotFound. A history the outbox cannot
// read leaves the other queues alone: the delete in the recorded queue
// stands on its own.
func (d *Dispatcher) deleteInOtherQueues(ctx context.Context, id naming.ID, queue string) (deleted bool, calls int, err error) {
	if d.fresh == nil {
		return false, 0, nil
	}
	hist, herr := d.box.Lookup(ctx, outbox.Query{Table: outbox.TableOf(id), ID: id.String(), History: true})
	if herr != nil {
		d.log.WarnContext(ctx, "cannot read the ID's history for tasks in other queues", "id", id.String(), "err", herr)
		return false, 0, nil
	}
	seen := map[string]bool{queue: true, "": true}
	for i := range hist {
		q := hist[i].Queue
		if seen[q] {
			continue
		}
		seen[q] = true
		n, derr := d.deleteTask(ctx, id.TaskName(q))
		calls += n
		switch code := codeOf(derr); {
		case derr == nil:
			deleted = true
			d.log.InfoContext(ctx, "cancel deleted the ID's task in another queue too", "id", id.String(), "queue", q)
		case code != codes.NotFound && err == nil:
			err = derr
		}
	}
	return deleted, calls, err
}
