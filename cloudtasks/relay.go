package cloudtasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
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

// relay is the loop NewDispatcher starts when the outbox records intents,
// and the notices WaitOutcome waits on.
type relay struct {
	wake chan struct{} // a pass is due at once
	stop context.CancelFunc
	done chan struct{} // closed when the loop has returned

	mu     sync.Mutex
	notice chan struct{} // closed when this process records an outcome
}

func newRelay() *relay {
	return &relay{wake: make(chan struct{}, 1), notice: make(chan struct{})}
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

// startRelay starts the relay loop when the outbox records intents and
// some queue is the dispatcher's to relay.
func (d *Dispatcher) startRelay() {
	d.relay = newRelay()
	if _, ok := d.box.(outbox.Intents); !ok || d.cfg.NoRelay || len(d.cfg.RelayQueues) == 0 {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	d.relay.stop, d.relay.done = stop, make(chan struct{})
	go d.relayLoop(ctx)
}

// stopRelay ends the relay loop and waits, within ctx, for its pass to
// return; intents it had claimed and not finished go to another relay
// once their claims expire.
func (d *Dispatcher) stopRelay(ctx context.Context) error {
	if d.relay.stop == nil {
		return nil
	}
	d.relay.stop()
	return wait(ctx, d.relay.done)
}

// relayLoop runs passes until ctx ends: at once when nudged, after
// RelayInterval otherwise, and again at once after a full batch.
func (d *Dispatcher) relayLoop(ctx context.Context) {
	defer close(d.relay.done)
	failing := false // logged once per run of failed passes, not every interval
	for {
		st, err := d.relayPass(ctx)
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
		case <-d.relay.wake:
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
	if _, ok := d.box.(outbox.Intents); !ok {
		return RelayStats{}, &ConfigError{Field: fieldOutbox, Value: fmt.Sprintf("%T", d.box),
			Rule: "records no intents; Relay needs an outbox that implements outbox.Intents (outbox/pgbox)"}
	}
	if d.flights.isClosed() {
		return RelayStats{}, ErrClosed
	}
	return d.relayPass(ctx)
}

// relayPass is Relay's work.
func (d *Dispatcher) relayPass(ctx context.Context) (RelayStats, error) {
	var st RelayStats
	store, ok := d.box.(outbox.Intents)
	if !ok || len(d.cfg.RelayQueues) == 0 {
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
		ins, err := store.ClaimIntents(ctx, queues, relayBatch, claimFor)
		if err != nil {
			return st, &OutboxError{Op: OpClaimIntents, BeforeCall: true, Err: err}
		}
		st.Claimed += len(ins)
		var mu sync.Mutex
		var g errgroup.Group
		g.SetLimit(relayConcurrent)
		for _, in := range ins {
			g.Go(func() error {
				v, err := d.relayOne(ctx, store, in)
				mu.Lock()
				defer mu.Unlock()
				st.count(v, err)
				return nil
			})
		}
		_ = g.Wait() // relayOne's errors are counted, not returned
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

// relayOne creates the task of one claimed intent in a relay flight, which
// a Dispatch, Cancel or Recover of the ID in this process waits out (and
// it theirs). It returns the status it recorded, or "" when the ID had
// moved on.
func (d *Dispatcher) relayOne(ctx context.Context, store outbox.Intents, in outbox.Intent) (outbox.Status, error) {
	if in.Delete {
		return d.relayCancel(ctx, store, in)
	}
	f, _, err := d.flights.do(ctx, in.ID, opRelay, func(f *flight) { d.relayIntent(ctx, f, store, in) })
	if err != nil {
		return "", err
	}
	if f.err != nil {
		d.log.WarnContext(ctx, "relay: intent left for a later pass", "id", in.ID, "err", f.err)
	}
	return f.relayed, f.err
}

// relayCancel carries out a delete intent with Cancel's own flight and
// records, then drops the intent. A cancel Cancel refuses (the queue
// recorded since differs) is dropped too: it can never succeed.
func (d *Dispatcher) relayCancel(ctx context.Context, store outbox.Intents, in outbox.Intent) (outbox.Status, error) {
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
		d.relay.recorded()
	}
	if derr := d.dropIntent(ctx, store, in); derr != nil {
		return "", derr
	}
	if err != nil {
		return "", err
	}
	return outbox.StatusCancelled, nil
}

// relayIntent is the work of a relay flight: if the intent's pending
// record is still the ID's latest, create the task and record the
// outcome, then drop the intent.
func (d *Dispatcher) relayIntent(leader context.Context, f *flight, store outbox.Intents, in outbox.Intent) {
	ctx := workContext(leader)
	prev, found, err := d.box.Latest(ctx, in.Table, in.ID)
	if err != nil {
		f.err = &OutboxError{ID: in.ID, Op: OpRead, BeforeCall: true, Err: err}
		return
	}
	if !found || prev.Version != in.Version || prev.Status != outbox.StatusPending {
		f.err = d.dropIntent(ctx, store, in)
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
	calls, err := d.cfg.Retry.retry(ctx, d.clock, rand.Float64, d.onRetry("CreateTask"), func(ctx context.Context, t try) error {
		return d.attempt(ctx, "CreateTask", t, codes.AlreadyExists, func(ctx context.Context) error {
			return d.createTask(ctx, in.ID, &req)
		})
	})
	rec := prev
	rec.Follow(&prev, d.clock.Now())
	rec.CreateCalls += int32(calls)
	rec.ErrorCode = ""
	switch code := codeOf(err); {
	case err == nil:
		rec.Status = outbox.StatusCreated
	case code == codes.AlreadyExists:
		rec.Status = outbox.StatusAlreadyExisted
	case transient(code) || ctx.Err() != nil:
		// Unknown whether the task exists: the intent and its pending
		// record stay as they are, and the next claim asks again.
		f.err = &CallError{ID: in.ID, Method: "CreateTask", Code: code, Calls: calls, Transient: true, Err: err}
		return
	default:
		rec.Status, rec.ErrorCode = outbox.StatusFailed, code.String()
	}
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
	d.relay.recorded()
	if d.log.Enabled(ctx, slog.LevelDebug) {
		d.log.DebugContext(ctx, "relayed", "id", in.ID, "status", rec.Status, "calls", calls)
	}
	f.err = d.dropIntent(ctx, store, in)
}

// dropIntent removes a finished intent.
func (d *Dispatcher) dropIntent(ctx context.Context, store outbox.Intents, in outbox.Intent) error {
	if err := store.DropIntent(ctx, in); err != nil {
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
	store, ok := d.box.(outbox.Intents)
	if !ok {
		return false, nil
	}
	return store.HasIntent(ctx, id)
}
