package cloudtasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sync"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// RelayStats counts what one Relay pass did.
type RelayStats struct {
	// Claimed counts the intents this pass claimed.
	Claimed int
	// Created counts tasks this pass created (recorded created).
	Created int
	// AlreadyExisted counts tasks that existed already (recorded
	// already_existed): another relay or a Dispatch of the ID created it
	// first, or this relay's earlier try did and stopped before recording.
	AlreadyExisted int
	// Failed counts creates refused with a permanent code (recorded
	// failed: the ID may be dispatched again).
	Failed int
	// Cancelled counts cancels carried out (CancelTx): the task deleted,
	// found gone, or unknown, and the cancel recorded as Cancel records
	// it.
	Cancelled int
	// Moved counts intents whose ID had moved on (a Dispatch, a Cancel or
	// a later transaction wrote after the intent's pending record):
	// dropped without a call.
	Moved int
	// Errors counts intents left for a later pass: transient errors that
	// outlasted the retry policy, or an outbox that could not record.
	Errors int
}

// The relay's batch: how many intents one claim takes, and how many of
// them are created at once.
const (
	relayBatch      = 64
	relayConcurrent = 16
)

// relay creates the tasks of committed intents: its loop of passes, which
// NewDispatcher starts when the outbox records intents, and the notices
// WaitOutcome waits on. It makes its calls and records through the
// dispatcher's flights, client and outbox, and decides by the same rules.
type relay struct {
	d     *Dispatcher
	store outbox.Intents // nil when the outbox records no intents

	wake chan struct{} // a pass is due at once
	stop context.CancelFunc
	done chan struct{} // closed when the loop has returned

	mu     sync.Mutex
	notice chan struct{} // closed when this process records an outcome
}

func newRelay(d *Dispatcher) *relay {
	return &relay{d: d, store: d.intents, wake: make(chan struct{}, 1), notice: make(chan struct{})}
}

// nudge asks the loop for a pass at once.
func (r *relay) nudge() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// next returns a channel closed at the next outcome this process records.
func (r *relay) next() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.notice
}

// recorded closes the current notice channel.
func (r *relay) recorded() {
	r.mu.Lock()
	close(r.notice)
	r.notice = make(chan struct{})
	r.mu.Unlock()
}

// start starts the loop when the outbox records intents and some queue is
// the dispatcher's to relay.
func (r *relay) start() {
	if r.store == nil || r.d.cfg.NoRelay || len(r.d.cfg.RelayQueues) == 0 {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	r.stop, r.done = stop, make(chan struct{})
	go r.loop(ctx)
}

// close ends the loop and waits, within ctx, for its pass to return;
// intents it had claimed and not finished go to another relay once their
// claims expire.
func (r *relay) close(ctx context.Context) error {
	if r.stop == nil {
		return nil
	}
	r.stop()
	return wait(ctx, r.done)
}

// loop runs passes until ctx ends: at once when nudged, after
// RelayInterval otherwise, and again at once after a full batch.
func (r *relay) loop(ctx context.Context) {
	defer close(r.done)
	d := r.d
	failing := false // logged once per run of failed passes, not every interval
	for {
		st, err := r.pass(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			d.log.WarnContext(ctx, "relay passes fail; trying again every interval", "err", err)
		case err == nil && failing:
			failing = false
			d.log.InfoContext(ctx, "relay passes work again")
		}
		if err == nil && st.Claimed == relayBatch {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-d.clock.After(d.cfg.RelayInterval):
		}
	}
}

// Relay runs one relay pass: it claims the committed intents of
// Config.RelayQueues (those of DispatchTx and ScheduleTimerTx calls, from
// any process on the outbox's database), a batch at a time, and for each
// creates the task outside any transaction and records the outcome over
// the intent's pending record with a conditional append. Several relays
// share the intents through their claims (FOR UPDATE SKIP LOCKED in
// pgbox), and the conditional append keeps one outcome per version
// whoever else writes; an ID that moved on since its intent is dropped
// without a call. NewDispatcher starts a loop of passes itself (see
// Config.NoRelay); call Relay to run one now, as "ctdispatch relay
// --once" does.
//
// Errors: a *ConfigError when the outbox records no intents; an
// *OutboxError when claiming failed. An intent that could not be finished
// is counted in Errors and left for a later pass.
func (d *Dispatcher) Relay(ctx context.Context) (RelayStats, error) {
	if d.intents == nil {
		return RelayStats{}, &ConfigError{Field: fieldOutbox, Value: fmt.Sprintf("%T", d.box),
			Rule: "records no intents; Relay needs an outbox that implements outbox.Intents (outbox/pgbox, outbox.Memory)"}
	}
	if d.flights.isClosed() {
		return RelayStats{}, ErrClosed
	}
	return d.relay.pass(ctx)
}

// pass is Relay's work.
func (r *relay) pass(ctx context.Context) (RelayStats, error) {
	var st RelayStats
	d := r.d
	if r.store == nil || len(d.cfg.RelayQueues) == 0 {
		return st, nil
	}
	queues := make([]string, len(d.cfg.RelayQueues))
	for i, q := range d.cfg.RelayQueues {
		queues[i] = d.cfg.queuePath(q)
	}
	// A claim outlasts the retries of a batch's creates, so that another
	// relay does not repeat them while they run.
	claimFor := 2*d.cfg.Retry.MaxElapsed + d.cfg.StaleAfter
	for {
		ins, err := r.store.ClaimIntents(ctx, queues, relayBatch, claimFor)
		if err != nil {
			return st, &OutboxError{Op: OpClaimIntents, BeforeCall: true, Err: err}
		}
		st.Claimed += len(ins)
		var mu sync.Mutex
		var g errgroup.Group
		g.SetLimit(relayConcurrent)
		for _, in := range ins {
			g.Go(func() error {
				v, err := r.one(ctx, in)
				mu.Lock()
				defer mu.Unlock()
				st.count(v, err)
				return nil
			})
		}
		_ = g.Wait() // one's errors are counted, not returned
		if len(ins) < relayBatch || ctx.Err() != nil {
			return st, ctx.Err()
		}
	}
}

// count adds one intent's result to st.
func (st *RelayStats) count(s outbox.Status, err error) {
	switch {
	case err != nil:
		st.Errors++
	case s == outbox.StatusCreated:
		st.Created++
	case s == outbox.StatusAlreadyExisted:
		st.AlreadyExisted++
	case s == outbox.StatusFailed:
		st.Failed++
	case s == outbox.StatusCancelled:
		st.Cancelled++
	default:
		st.Moved++
	}
}

// one creates the task of one claimed intent in a relay flight, which a
// Dispatch, Cancel or Recover of the ID in this process waits out (and it
// theirs). It returns the status it recorded, or "" when the ID had moved
// on.
func (r *relay) one(ctx context.Context, in outbox.Intent) (outbox.Status, error) {
	if in.Delete {
		return r.cancel(ctx, in)
	}
	d := r.d
	f, _, err := d.flights.do(ctx, in.ID, opRelay, func(f *flight) { r.create(ctx, f, in) })
	if err != nil {
		return "", err
	}
	if f.err != nil {
		d.log.WarnContext(ctx, "relay: intent left for a later pass", "id", in.ID, "err", f.err)
	}
	return f.relayed, f.err
}

// cancel carries out a delete intent with Cancel's own flight and records,
// then drops the intent. A cancel Cancel refuses (the queue recorded since
// differs) is dropped too: it can never succeed.
func (r *relay) cancel(ctx context.Context, in outbox.Intent) (outbox.Status, error) {
	d := r.d
	id, err := naming.Parse(in.ID)
	if err != nil {
		return "", fmt.Errorf("cloudtasks: relay %s: %w", in.ID, err)
	}
	_, err = d.cancelID(ctx, id, path.Base(in.Queue))
	var re *RequestError
	switch {
	case errors.As(err, &re):
		d.log.WarnContext(ctx, "relay: cancel refused; intent dropped", "id", in.ID, "err", err)
	case err != nil:
		return "", err
	default:
		r.recorded()
	}
	if derr := r.drop(ctx, in); derr != nil {
		return "", derr
	}
	if err != nil {
		return "", err
	}
	return outbox.StatusCancelled, nil
}

// create is the work of a relay flight: if the intent's pending record is
// still the ID's latest, create the task and record the outcome (by
// onCreate, as Dispatch does), then drop the intent.
func (r *relay) create(leader context.Context, f *flight, in outbox.Intent) {
	ctx, d := workContext(leader), r.d
	prev, found, err := d.box.Latest(ctx, in.Table, in.ID)
	if err != nil {
		f.err = &OutboxError{ID: in.ID, Op: OpRead, BeforeCall: true, Err: err}
		return
	}
	if !found || prev.Version != in.Version || prev.Status != outbox.StatusPending {
		f.err = r.drop(ctx, in)
		return
	}
	var req cloudtaskspb.CreateTaskRequest
	if err := proto.Unmarshal(in.Request, &req); err != nil {
		f.err = fmt.Errorf("cloudtasks: relay %s: the intent's CreateTask request does not decode: %w", in.ID, err)
		return
	}
	kind := "dispatch"
	if id, err := naming.Parse(in.ID); err == nil {
		kind = id.Kind().String()
	}
	calls, err := d.call(callSpans(ctx), "CreateTask", codes.AlreadyExists, func(ctx context.Context) error {
		return d.createTask(ctx, in.ID, &req)
	})
	rec := prev
	rec.Follow(&prev, d.clock.Now())
	rec.CreateCalls += int32(calls)
	rec.ErrorCode = ""
	v := onCreate(err, ctx.Err() != nil)
	switch v.status {
	case "":
		// Unknown whether the task exists: the intent and its pending
		// record stay as they are, and the next claim asks again.
		f.err = &CallError{ID: in.ID, Method: "CreateTask", Code: v.code, Calls: calls, Transient: true, Err: err}
		return
	case outbox.StatusFailed:
		rec.ErrorCode = v.code.String()
	}
	rec.Status = v.status
	err = outbox.AppendAndWait(ctx, d.box, rec)
	switch {
	case errors.Is(err, outbox.ErrVersionConflict):
		d.outcomeOvertaken(ctx, rec, err)
	case err != nil:
		// The intent stays: the next claim's create finds the task and
		// records already_existed.
		d.outboxFailed(rec.ID, false, err)
		f.err = &OutboxError{ID: in.ID, Op: OpRecordOutcome, Err: err}
		return
	default:
		d.outboxOK.Store(true)
		f.relayed = rec.Status
	}
	d.m.outcome(ctx, kind, string(rec.Status), d.clock.Since(in.CreatedAt))
	r.recorded()
	if d.log.Enabled(ctx, slog.LevelDebug) {
		d.log.DebugContext(ctx, "relayed", "id", in.ID, "status", rec.Status, "calls", calls)
	}
	f.err = r.drop(ctx, in)
}

// drop removes a finished intent.
func (r *relay) drop(ctx context.Context, in outbox.Intent) error {
	if err := r.store.DropIntent(ctx, in); err != nil {
		return &OutboxError{ID: in.ID, Op: OpClaimIntents, Err: err}
	}
	return nil
}

// WaitOutcome waits until the latest record of id (a dispatch or timer ID)
// is no longer pending and no intent of the ID waits for a relay, and
// returns it: created, already_existed or failed (with its gRPC code in
// ErrorCode) once a relay has created the task of a committed DispatchTx
// or ScheduleTimerTx, cancelled once it has carried out a CancelTx, or
// whatever a Dispatch, Cancel or Recover recorded meanwhile. It wakes this dispatcher's relay, and
// reads the outbox again whenever a relay of this process records an
// outcome and every Config.RelayInterval, so it sees other processes'
// relays too.
//
// Errors: *RequestError for a malformed ID, or one with no record at all
// (its transaction rolled back, or has not committed yet); *WaitError
// when ctx ends first; the outbox's error when it cannot be read.
func (d *Dispatcher) WaitOutcome(ctx context.Context, id string) (outbox.Record, error) {
	for {
		notice := d.relay.next()
		nid, err := d.settledID(ctx, id)
		if err != nil {
			var re *RequestError
			if errors.As(err, &re) {
				return outbox.Record{}, err
			}
			return outbox.Record{}, &WaitError{ID: id, Op: "wait for the outcome", Started: true, Err: err}
		}
		rec, ok, err := d.box.Latest(ctx, outbox.TableOf(nid), nid.String())
		switch {
		case err != nil:
			return outbox.Record{}, err
		case !ok:
			return outbox.Record{}, &RequestError{Field: "ID", Value: shorten(id),
				Rule: "has no record: nothing was dispatched under it, or its transaction rolled back or has not committed"}
		case rec.Status != outbox.StatusPending:
			if waiting, err := d.intentWaiting(ctx, nid.String()); err != nil || !waiting {
				return rec, err
			}
		}
		d.relay.nudge()
		select {
		case <-notice:
		case <-d.clock.After(d.cfg.RelayInterval):
		case <-ctx.Done():
			return outbox.Record{}, &WaitError{ID: id, Op: "wait for the outcome", Started: true, Err: ctx.Err()}
		}
	}
}

// intentWaiting reports whether id has an intent no relay has finished.
func (d *Dispatcher) intentWaiting(ctx context.Context, id string) (bool, error) {
	if d.intents == nil {
		return false, nil
	}
	return d.intents.HasIntent(ctx, id)
}
