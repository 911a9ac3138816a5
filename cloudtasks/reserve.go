package cloudtasks

import (
	"context"
	"errors"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// reserve reads the newest record of id before a create, as latest does.
// With an outbox that is an outbox.Reserver (a database, which decides a
// conditional append before it returns), it first tries to record id's
// first pending record instead, and reads only when id has a record
// already, from the same round trip: reserved then reports that the
// pending record is kept, and the create goes on to its call. A refusal
// that answers without a create (created or already_existed) is read
// again as latest does, when the store is an outbox.FreshReader. err is an
// *OutboxError when the pending record could not be written.
func (d *Dispatcher) reserve(ctx context.Context, f *flight, id naming.ID, req *cloudtaskspb.CreateTaskRequest, now time.Time) (prev outbox.Record, found, reserved bool, unseen time.Duration, err error) {
	if d.reserver == nil {
		prev, found, unseen, err = d.latest(ctx, id)
		return prev, found, false, unseen, err
	}
	rec := d.pendingRecord(ctx, f, id, req)
	rec.Follow(nil, now)
	cur, kept, err := d.reserver.Reserve(ctx, rec)
	switch {
	case err != nil:
		return outbox.Record{}, false, false, 0, d.outboxFailed(rec.ID, true, err)
	case !kept:
		if d.fresh == nil || (cur.Status != outbox.StatusCreated && cur.Status != outbox.StatusAlreadyExisted) {
			return cur, true, false, 0, nil
		}
		prev, found, unseen, err = d.fresh.LatestFresh(ctx, outbox.TableOf(id), id.String())
		return prev, found, false, unseen, err
	}
	if d.cfg.Durability != DurabilityStrict {
		d.outboxOK.Store(true)
	}
	return outbox.Record{}, false, true, 0, nil
}

// pendingRecord is the pending record of a create of id by req: in req's
// queue, under its task name, with f's payload fingerprint and the trace
// of ctx. Its Version and times are for the caller to set (Follow).
func (d *Dispatcher) pendingRecord(ctx context.Context, f *flight, id naming.ID, req *cloudtaskspb.CreateTaskRequest) outbox.Record {
	rec := recordOf(id, req.GetParent())
	rec.TaskName = req.GetTask().GetName()
	traceIDs(ctx, &rec)
	rec.Status, rec.PayloadSHA256 = outbox.StatusPending, f.fp
	return rec
}

// readError is the error of a create whose first read (or reservation) of
// the outbox failed.
func readError(key string, err error) error {
	var oe *OutboxError
	if errors.As(err, &oe) {
		return err
	}
	return &OutboxError{ID: key, Op: OpRead, BeforeCall: true, Err: err}
}
