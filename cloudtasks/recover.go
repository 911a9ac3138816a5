package cloudtasks

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// RecoverStats counts what one Recover pass did.
type RecoverStats struct {
	// Stale is how many pending records were older than StaleAfter.
	Stale int
	// Found counts records whose task exists: recorded as already_existed.
	Found int
	// NotFound counts records whose task does not exist now: recorded as
	// not_found (never created, or ran and gone), so the ID may be
	// dispatched again. Not a failure.
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
// between recording pending and recording the outcome, or of a call whose
// outcome stayed unknown. For each it asks Cloud Tasks (GetTask) whether
// the named task exists, and writes what that answer can tell:
//
//	GetTask answered     status written  what the caller should do
//	OK                   already_existed nothing: a repeat is answered from the outbox
//	NOT_FOUND            not_found       decide: the task was never created, or it ran
//	                                     and is gone. A repeated Dispatch creates it
//	                                     (created) or, if the name was used within the
//	                                     service's reuse window (up to 24 h), gets
//	                                     already_existed: it did exist
//	another code         (stays pending) nothing: the next pass tries again
//
// Recover never writes created: it cannot tell whether the task it found
// was made by the stopped call or by a concurrent caller in another
// process, which may have recorded created itself, and an ID has at most
// one created record. already_existed says what Recover knows: the task
// exists.
//
// NOT_FOUND cannot tell "never created" from "ran and was deleted", so it is
// not recorded as a failure. Only the service's ALREADY_EXISTS to a create
// call says the name was used recently, and a repeated Dispatch records
// that as already_existed. A record that changed while Recover looked (a
// concurrent Dispatch or Recover finished it) is left alone and not
// counted as stale.
//
// Records of any processor are taken over unless EnforceOwnership is on;
// the new records carry this processor's UUID, and each hand-over is
// logged and counted. Recover shares the in-flight table with Dispatch,
// ScheduleTimer and Cancel, so it never races them on one ID.
//
// Recover may run at start and periodically; an error on one record does
// not stop the pass.
func (d *Dispatcher) Recover(ctx context.Context) (RecoverStats, error) {
	var st RecoverStats
	if d.flights.isClosed() {
		return st, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return st, &WaitError{Op: "recover", Err: err}
	}
	ctx, span := d.startRecover(ctx)
	err := d.recoverPass(ctx, &st)
	endRecover(span, &st, err)
	return st, err
}

// recoverPass is the work of one Recover pass; it counts into st.
func (d *Dispatcher) recoverPass(ctx context.Context, st *RecoverStats) error {
	for _, table := range outbox.Tables() {
		if table == outbox.TableDeliveries {
			continue // a worker's table: nothing re-drives a delivery
		}
		recs, err := d.pending(ctx, table)
		if err != nil {
			return &OutboxError{Op: OpListPending, BeforeCall: true, Err: fmt.Errorf("%s: %w", table, err)}
		}
		for _, rec := range recs {
			if err := ctx.Err(); err != nil {
				// The records already looked at are finished; the rest wait
				// for the next pass.
				return fmt.Errorf("cloudtasks: recover: stopped after %d stale records, the rest are left for the next pass: %w", st.Stale, err)
			}
			st.Stale++
			if err := d.recoverOne(ctx, rec, st); errors.Is(err, ErrClosed) {
				st.Stale--
				return err
			}
		}
	}
	return nil
}

// pending lists the stale records of table: those this process claims when
// the outbox shares them out among recovering processes (outbox.Claimer;
// a claim lasts StaleAfter, long enough for a pass over them), else all.
func (d *Dispatcher) pending(ctx context.Context, table outbox.Table) ([]outbox.Record, error) {
	if d.claimer != nil {
		return d.claimer.ClaimPending(ctx, table, d.cfg.StaleAfter, d.cfg.StaleAfter)
	}
	return d.box.Pending(ctx, table, d.cfg.StaleAfter)
}

func (d *Dispatcher) recoverOne(ctx context.Context, rec outbox.Record, st *RecoverStats) error {
	id, err := naming.Parse(rec.ID)
	if err != nil {
		st.Errors++
		d.log.WarnContext(ctx, "recover: pending record with an invalid ID", "id", rec.ID, "err", err)
		return nil
	}
	if rec.ProcessorUUID != d.processor && d.cfg.EnforceOwnership {
		st.SkippedNotOwned++
		d.log.InfoContext(ctx, "recover: pending record of another processor left alone (ownership enforced)",
			"id", rec.ID, "owner", rec.ProcessorUUID)
		return nil
	}
	ctx, span := d.startResolve(ctx, &rec)
	f, _, err := d.flights.do(ctx, rec.ID, opRecover, func(f *flight) { d.resolve(ctx, f, rec) })
	if errors.Is(err, ErrClosed) {
		endResolve(span, f, err)
		return err
	}
	if err == nil {
		err = f.err
	}
	endResolve(span, f, err)
	if err != nil {
		st.Errors++
		d.log.WarnContext(ctx, "recover: could not resolve pending record", "id", rec.ID, "err", err)
		return nil
	}
	switch f.verdict {
	case verdictMoved:
		st.Stale--
		return nil
	case verdictExisted:
		st.Found++
	case verdictNotFound:
		st.NotFound++
	}
	d.m.recovered.Add(ctx, 1, metricAttrs(id.Kind().String(), string(f.verdict)))
	if rec.ProcessorUUID != d.processor {
		st.HandedOver++
		d.noteHandover(ctx, id, rec.ProcessorUUID, "recover")
	}
	d.log.InfoContext(ctx, "recovered pending record", "id", rec.ID, "result", string(f.verdict), "status", string(f.verdict), "from_processor", rec.ProcessorUUID)
	return nil
}

// resolve is the work of one recover flight: if rec is still the ID's
// latest state, ask Cloud Tasks and record the verdict.
func (d *Dispatcher) resolve(leader context.Context, f *flight, rec outbox.Record) {
	ctx := workContext(leader)
	latest, found, err := d.box.Latest(ctx, rec.Table, rec.ID)
	if errors.Is(err, outbox.ErrConcurrentWrites) {
		f.verdict = verdictMoved // another process wrote this version too: not a lone pending record
		return
	}
	if err != nil {
		f.err = err
		return
	}
	if !found || latest.Status != outbox.StatusPending || !latest.UpdatedAt.Equal(rec.UpdatedAt) {
		f.verdict = verdictMoved
		return
	}
	name := rec.TaskName
	if name == "" {
		name = naming.TaskName(rec.Queue, rec.CloudTaskID)
	}
	err = d.getTask(ctx, name)
	next := latest
	next.Follow(&latest, d.clock.Now())
	next.ErrorCode = ""
	status, ok := onGet(err)
	switch {
	case !ok:
		f.err = err
		return
	case status == outbox.StatusNotFound:
		next.ErrorCode, f.verdict = codes.NotFound.String(), verdictNotFound
	default:
		f.verdict = verdictExisted
	}
	next.Status = status
	err = outbox.AppendAndWait(ctx, d.box, next)
	if errors.Is(err, outbox.ErrVersionConflict) {
		f.verdict = verdictMoved // another process recorded a later state first
		return
	}
	if err != nil {
		d.outboxFailed(rec.ID, false, err)
		f.err = err
	}
}
