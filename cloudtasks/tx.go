package cloudtasks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// DispatchTx records a dispatch inside the caller's database transaction
// tx, for a relay to create once tx commits: the state change that needs
// the task and the task's record commit together or not at all. tx is a
// transaction on the database of the dispatcher's outbox, which must
// record intents (outbox.Intents: package outbox/pgbox, or outbox.Memory);
// pgbox.SQLTx makes one of a *sql.Tx, pgxtx.Tx of a pgx.Tx, and a Memory's
// Begin starts one of its own.
//
// Inside tx it checks the ID as Dispatch does, with the same answers: an
// ID recorded as created or already_existed with the same payload is
// answered already_existed (Skipped) and nothing is written; another
// payload is a *ConflictError; a name a Cancel left held is a
// *NameHeldError. Otherwise it writes the ID's pending record and an
// intent holding the whole CreateTask request (task name, queue, target,
// headers, body up to MaxTaskSize, OIDC settings, schedule time) and
// answers OutcomeQueued. No Cloud Tasks call is made; a tx that rolls
// back leaves no trace, and no task is ever created for it. With an
// outbox that implements outbox.IntentReserver (pgbox, Memory) it first
// writes the record and intent as the ID's first, unless tx sees a
// record of it, and reads only then: a new ID costs one statement.
//
// After commit, a relay (see Config.RelayQueues and Relay) in any
// dispatcher on the database creates the task and records created,
// already_existed or failed over the pending record. WaitOutcome waits
// for that record; Latest and History read it later. The queue must be
// one some relay takes, or the record stays pending: Recover leaves IDs
// awaiting a relay alone.
//
// Errors are those of Dispatch before any call (*RequestError,
// *ConflictError, *OwnershipError, *NameHeldError, *OutboxError), and a
// *ConfigError when the outbox records no intents. An error from the
// database may have aborted tx: roll it back.
func (d *Dispatcher) DispatchTx(ctx context.Context, tx outbox.Tx, req DispatchRequest) (DispatchResult, error) {
	id, err := req.ID()
	if err != nil {
		return DispatchResult{}, err
	}
	return d.submitTx(ctx, tx, id, &req.Task)
}

// ScheduleTimerTx records a timer inside the caller's database transaction
// tx, for a relay to create once tx commits: ScheduleTimer's checks with
// DispatchTx's transaction, answers and errors. Its records go to the
// outbox's timers table.
func (d *Dispatcher) ScheduleTimerTx(ctx context.Context, tx outbox.Tx, req TimerRequest) (TimerResult, error) {
	id, task, err := d.timerTask(&req)
	if err != nil {
		return TimerResult{}, err
	}
	res, err := d.submitTx(ctx, tx, id, &task)
	if err != nil {
		return TimerResult{}, err
	}
	return timerResult(res, id), nil
}

// submitTx is DispatchTx's work for the task of id (a dispatch or a timer).
func (d *Dispatcher) submitTx(ctx context.Context, tx outbox.Tx, id naming.ID, t *Task) (DispatchResult, error) {
	if d.intents == nil {
		return DispatchResult{}, &ConfigError{Field: fieldOutbox, Value: fmt.Sprintf("%T", d.box),
			Rule: "records nothing inside a transaction; DispatchTx and ScheduleTimerTx need an outbox that implements outbox.Intents (outbox/pgbox, outbox.Memory)"}
	}
	if tx == nil {
		return DispatchResult{}, &RequestError{Field: "tx", Value: "nil", Rule: "is required: the transaction to record the dispatch in"}
	}
	if d.flights.isClosed() {
		return DispatchResult{}, ErrClosed
	}
	start := d.clock.Now()
	if err := t.validate(start); err != nil {
		return DispatchResult{}, err
	}
	if t.Queue == "" && d.cfg.Queue == "" {
		return DispatchResult{}, &RequestError{Field: "Task.Queue", Rule: "is required: Config.Queue names no default queue"}
	}
	queuePath := d.queueOf(t.Queue)
	ctx, span := d.startSend(ctx, id, queuePath)
	res, err := d.recordIntent(ctx, tx, id, t, queuePath, start)
	endSend(span, id, &res, err)
	return res, err
}

// recordIntent checks id inside tx and records its pending record and
// intent there. With an outbox.IntentReserver it first records them as
// the ID's first, without reading (one statement for a new ID), and
// reads only when that is refused. Another transaction that wrote the
// ID's next version and committed first makes it read again (READ
// COMMITTED sees that write), at most rereads times.
func (d *Dispatcher) recordIntent(ctx context.Context, tx outbox.Tx, id naming.ID, t *Task, queuePath string, now time.Time) (DispatchResult, error) {
	key, table := id.String(), outbox.TableOf(id)
	fp := naming.PayloadFingerprint(t.Body)
	reserve := d.intentReserver != nil
	for try := 0; ; {
		req := t.createRequest(id, queuePath, now)
		if err := d.injectTrace(ctx, t, req); err != nil {
			return DispatchResult{}, err
		}
		if err := t.checkSize(req); err != nil {
			return DispatchResult{}, err
		}
		var prev *outbox.Record
		if !reserve {
			p, found, err := d.intents.LatestTx(ctx, tx, table, key)
			if err != nil {
				return DispatchResult{}, &OutboxError{ID: key, Op: OpRead, BeforeCall: true, Err: err}
			}
			if found {
				prev = &p
			}
		}
		res, rec, in, done, err := d.pendingIntent(ctx, id, t, req, prev, fp, now)
		if done || err != nil {
			return res, err
		}
		if reserve {
			reserve = false
			kept, err := d.intentReserver.ReserveIntent(ctx, tx, rec, in)
			if err != nil {
				return DispatchResult{}, &OutboxError{ID: key, Op: OpRecordPending, BeforeCall: true, Err: err}
			}
			if kept {
				res.Outcome, res.FirstRecorded = OutcomeQueued, rec.CreatedAt
				return res, nil
			}
			continue // the ID has a record: read it
		}
		err = d.intents.AppendIntent(ctx, tx, rec, in)
		if errors.Is(err, outbox.ErrVersionConflict) && try < rereads {
			try++
			now = d.clock.Now()
			continue
		}
		if err != nil {
			return DispatchResult{}, &OutboxError{ID: key, Op: OpRecordPending, BeforeCall: true, Err: err}
		}
		res.Outcome, res.FirstRecorded = OutcomeQueued, rec.CreatedAt
		return res, nil
	}
}

// answerFromRecord answers a transactional dispatch of an ID recorded as
// prev, as Dispatch would before calling: done is true when res holds the
// answer (already_existed), err when the ID may not be dispatched now.
// Otherwise a new intent is due: after a failure, a not_found, a cancel
// whose name is free again, or over a pending record (whose own call or
// intent creates the same task, so a second one is only a repeat).
func (d *Dispatcher) answerFromRecord(ctx context.Context, res *DispatchResult, prev *outbox.Record, fp string, now time.Time) (done bool, err error) {
	switch onRecord(prev, fp, d.processor, d.cfg.EnforceOwnership) {
	case repeatConflict:
		return false, d.conflict(ctx, prev, fp)
	case repeatNotOwner:
		return false, &OwnershipError{ID: prev.ID, Owner: prev.ProcessorUUID}
	case repeatSkip:
		res.Outcome, res.FirstRecorded, res.Skipped = OutcomeAlreadyExisted, prev.CreatedAt, true
		return true, nil
	}
	if f := (&flight{}); deletedByCancel(prev) && d.nameHeld(ctx, f, prev, now) {
		return false, f.err
	}
	return false, nil
}

// CancelTx records a cancel of an internal ID (a dispatch or a timer)
// inside the caller's database transaction tx, for a relay to carry out
// once tx commits: the relay deletes the task and records the cancel as
// Cancel does (deleted, already gone, or unknown). A DispatchTx or
// ScheduleTimerTx of the ID that no relay has finished is replaced, so its
// task is never created. Inside tx it checks the queue as Cancel does: the
// one the outbox recorded for the ID, which queue may name or leave
// empty; an ID the outbox does not know needs queue. The answer is
// CancelQueued; WaitOutcome then waits for the cancel's record. A tx that
// rolls back cancels nothing.
//
// Errors: *RequestError before anything is written (a malformed ID, a
// queue that differs from the record or is missing, a queue no relay of
// this dispatcher takes is not checked: name it in some relay's
// RelayQueues); *OutboxError; a *ConfigError when the outbox records no
// intents.
func (d *Dispatcher) CancelTx(ctx context.Context, tx outbox.Tx, id, queue string) (CancelResult, error) {
	if d.intents == nil {
		return CancelResult{}, &ConfigError{Field: fieldOutbox, Value: fmt.Sprintf("%T", d.box),
			Rule: "records nothing inside a transaction; CancelTx needs an outbox that implements outbox.Intents (outbox/pgbox, outbox.Memory)"}
	}
	nid, err := parseID("ID", id)
	if err != nil {
		return CancelResult{}, err
	}
	if queue != "" && !queuePattern.MatchString(queue) {
		return CancelResult{}, &RequestError{Field: "Queue", Value: shorten(queue), Rule: "is not a queue ID; allowed: 1 to 100 of [A-Za-z0-9-]"}
	}
	if tx == nil {
		return CancelResult{}, &RequestError{Field: "tx", Value: "nil", Rule: "is required: the transaction to record the cancel in"}
	}
	if d.flights.isClosed() {
		return CancelResult{}, ErrClosed
	}
	key, table := nid.String(), outbox.TableOf(nid)
	prev, known, err := d.intents.LatestTx(ctx, tx, table, key)
	if err != nil {
		return CancelResult{}, &OutboxError{ID: key, Op: OpRead, BeforeCall: true, Err: err}
	}
	queuePath, err := cancelQueue(key, &prev, known, queue, d.queueOf)
	if err != nil {
		return CancelResult{}, err
	}
	in := outbox.Intent{Delete: true, Table: table, ID: key, Version: prev.Version, Queue: queuePath}
	if err := d.intents.AppendCancel(ctx, tx, in); err != nil {
		return CancelResult{}, &OutboxError{ID: key, Op: OpRecordCancel, Err: err}
	}
	return CancelResult{ID: key, CloudTaskID: nid.CloudTaskID(), TaskName: nid.TaskName(queuePath), Outcome: CancelQueued}, nil
}
