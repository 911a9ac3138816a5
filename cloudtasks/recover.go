package cloudtasks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// RecoverStats counts what one Recover pass did.
type RecoverStats struct {
	// Stale is how many pending records were older than StaleAfter.
	Stale int
	// Found counts records whose task exists: recorded as created.
	Found int
	// NotFound counts records whose task does not exist: recorded as failed
	// with error code NOT_FOUND, so the ID may be dispatched again.
	NotFound int
	// HandedOver counts records left by another processor and finished by
	// this one.
	HandedOver int
	// SkippedNotOwned counts records of other processors left alone because
	// EnforceOwnership is on.
	SkippedNotOwned int
	// Errors counts records that could not be resolved this pass (they stay
	// pending and are tried again next pass).
	Errors int
}

// Recover finishes the records of both tables that stayed pending for
// longer than Config.StaleAfter — the trace of a process that stopped
// between recording pending and recording the outcome. For each it asks
// Cloud Tasks whether the named task exists: if it does, the record becomes
// created; if not, failed with error code NOT_FOUND (the task was never
// created, or it already ran and was deleted; the outbox keeps no payload
// to create it from, and the caller's repeated Dispatch under the same ID
// is allowed after a failure). Records of any processor are taken over
// unless EnforceOwnership is on; the new records carry this processor's
// UUID, and each hand-over is logged and counted.
//
// Recover may run at start and periodically; an error on one record does
// not stop the pass.
func (d *Dispatcher) Recover(ctx context.Context) (RecoverStats, error) {
	var st RecoverStats
	if d.closed.Load() {
		return st, ErrClosed
	}
	for _, table := range outbox.Tables {
		recs, err := d.box.Pending(ctx, table, d.cfg.StaleAfter)
		if err != nil {
			return st, fmt.Errorf("cloudtasks: recover: list pending %s: %w", table, err)
		}
		for _, rec := range recs {
			if err := ctx.Err(); err != nil {
				return st, err
			}
			st.Stale++
			d.recoverOne(ctx, rec, &st)
		}
	}
	return st, nil
}

func (d *Dispatcher) recoverOne(ctx context.Context, rec outbox.Record, st *RecoverStats) {
	id, err := naming.Parse(rec.ID)
	if err != nil {
		st.Errors++
		d.log.Warn("recover: pending record with an invalid ID", "id", rec.ID, "err", err)
		return
	}
	if rec.ProcessorUUID != d.processor && d.cfg.EnforceOwnership {
		st.SkippedNotOwned++
		d.log.Info("recover: pending record of another processor left alone (ownership enforced)",
			"id", rec.ID, "owner", rec.ProcessorUUID)
		return
	}
	// Share the flight with a concurrent Dispatch of the same ID, so the two
	// never race on the record.
	v, err, _ := d.flights.Do(rec.ID, func() (any, error) {
		latest, found, err := d.box.Latest(ctx, rec.Table, rec.ID)
		if err != nil {
			return "", err
		}
		if !found || latest.Status != outbox.StatusPending || !latest.UpdatedAt.Equal(rec.UpdatedAt) {
			return "moved", nil // finished or re-driven meanwhile
		}
		name := rec.TaskName
		if name == "" {
			name = rec.Queue + "/tasks/" + rec.CloudTaskID
		}
		_, err = d.cfg.Retry.retry(ctx, d.clock, rand.Float64, d.onRetry("GetTask"), func(ctx context.Context) error {
			_, err := d.client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: name})
			d.m.call(ctx, "GetTask", codeOf(err))
			return err
		})
		next := latest
		next.UpdatedAt = time.Time{} // now, by the outbox's clock
		next.ErrorCode = ""
		result := ""
		switch code := codeOf(err); {
		case err == nil:
			next.Status, result = outbox.StatusCreated, "created"
		case code == codes.NotFound:
			next.Status, next.ErrorCode, result = outbox.StatusFailed, code.String(), "not_found"
		default:
			return "", err
		}
		if err := d.box.Append(context.WithoutCancel(ctx), next); err != nil {
			return "", err
		}
		return result, nil
	})
	if err != nil {
		st.Errors++
		d.log.Warn("recover: could not resolve pending record", "id", rec.ID, "err", err)
		return
	}
	result := v.(string)
	switch result {
	case "moved":
		st.Stale--
		return
	case "created":
		st.Found++
	case "not_found":
		st.NotFound++
	}
	d.m.recovered.Add(ctx, 1, metricAttrs(id.Kind().String(), result))
	if rec.ProcessorUUID != d.processor {
		st.HandedOver++
		d.noteHandover(ctx, id, rec.ProcessorUUID, "recover")
	}
	d.log.Info("recovered pending record", "id", rec.ID, "result", result, "from_processor", rec.ProcessorUUID)
}
