package cloudtasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
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

// relayBatch is how many intents one claim takes.
const relayBatch = 64

// relay creates the tasks of committed intents: its loop of passes, which
// NewDispatcher starts when the outbox records intents, the listener that
// wakes it, and the notices WaitOutcome waits on. It makes its calls and
// records through the dispatcher's flights, client and outbox, and
// decides by the same rules.
type relay struct {
	d       *Dispatcher
	store   outbox.Intents // nil when the outbox records no intents
	notices outbox.Notices // nil when the outbox sends no notifications
	queues  []string       // full resource names of Config.RelayQueues

	wake     chan struct{} // a pass is due at once
	stopping chan struct{} // closed by close: claim nothing, start nothing more
	// halt ends the loop's waits for its calls in flight, at the drain's
	// bound; quiet ends the listener and the announcer, once the loop is
	// done.
	halt, quiet context.CancelFunc
	done        chan struct{} // closed when the loop has returned; nil without a loop
	side        sync.WaitGroup
	announce    chan struct{} // an outcome notification is due
	closeOnce   sync.Once
	closeErr    error

	mu     sync.Mutex
	notice chan struct{} // closed when an outcome is recorded, here or as notified
	// held are the claimed intents that ended in an error and keep their
	// claim: see held.
	held []held
	// left are the intents still in flight when the drain ended;
	// unreleased, those claimed and not in flight that it could not
	// release; claimsExpire, when the last of their claims expires.
	left, unreleased []outbox.Intent
	claimsExpire     time.Time
	// trail nudges the loop one notice gap after the last notification
	// of intents (lookAgainLater).
	trail clockwork.Timer
}

// held is a claimed intent that ended in an error. One that Cloud Tasks
// did not answer keeps its claim, which spaces the next try (the claim
// time is its backoff); one that the outbox failed (the database) is
// released before the next claim, so that the relay takes it again as
// soon as the database answers instead of after the claim. Both are
// released when the relay stops.
type held struct {
	in       outbox.Intent
	expires  time.Time
	retryNow bool
}

func newRelay(d *Dispatcher) *relay {
	r := &relay{d: d, store: d.intents, notices: d.notices, wake: make(chan struct{}, 1), stopping: make(chan struct{}),
		announce: make(chan struct{}, 1), notice: make(chan struct{})}
	for _, q := range d.cfg.RelayQueues {
		r.queues = append(r.queues, d.cfg.queuePath(q))
	}
	return r
}

// nudge asks the loop for a pass at once.
func (r *relay) nudge() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// next returns a channel closed at the next outcome recorded, by this
// process or, as a notification says, by another.
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

// isStopping reports whether close has begun.
func (r *relay) isStopping() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

// start starts the listener when Config.Listener is set, and the loop
// (with the announcer of its outcomes) when the outbox records intents
// and some queue is the dispatcher's to relay.
func (r *relay) start() {
	cfg := &r.d.cfg
	relaying := r.store != nil && !cfg.NoRelay && len(r.queues) > 0
	if relaying {
		r.done = make(chan struct{})
	}
	var side context.Context
	side, r.quiet = context.WithCancel(context.Background())
	if cfg.Listener != nil {
		r.side.Go(func() { r.listen(side) })
	}
	if !relaying {
		return
	}
	if r.notices != nil {
		r.side.Go(func() { r.announcer(side) })
	}
	var ctx context.Context
	ctx, r.halt = context.WithCancel(context.Background())
	go r.loop(ctx)
}

// close stops the relay and drains it: the loop claims nothing more and
// releases the intents it claimed and did not start, and its calls in
// flight may finish for Config.RelayDrainTimeout, or until ctx ends if
// sooner. It returns an error naming the intents still in flight then (or
// not released), and who takes them.
func (r *relay) close(ctx context.Context) error {
	r.closeOnce.Do(func() { r.closeErr = r.drain(ctx) })
	return r.closeErr
}

func (r *relay) drain(ctx context.Context) error {
	if r.quiet == nil {
		return nil
	}
	defer r.quiet()
	close(r.stopping)
	if r.done == nil {
		r.quiet()
		r.side.Wait()
		return nil
	}
	drain, cancel := context.WithTimeout(ctx, r.d.cfg.RelayDrainTimeout)
	defer cancel()
	if wait(drain, r.done) != nil {
		r.halt()
		<-r.done
	}
	r.halt()
	release, cancelRelease := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancelRelease()
	if err := r.releaseHeld(release, true); err != nil {
		r.d.log.WarnContext(ctx, "relay: stopping, and the intents it held after errors could not be released", "err", err)
		r.mu.Lock()
		for _, h := range r.held {
			r.unreleased = append(r.unreleased, h.in)
			r.claimsExpire = later(r.claimsExpire, h.expires)
		}
		r.held = nil
		r.mu.Unlock()
	}
	r.quiet()
	r.side.Wait()
	r.mu.Lock()
	if r.trail != nil {
		r.trail.Stop()
	}
	r.mu.Unlock()
	return r.drainError()
}

// releaseTimeout bounds a stopping relay's releases, of the intents it
// claimed and did not start and of those it holds after errors, which the
// drain's bound (for the calls in flight) does not cut short: it
// releases what it can.
const releaseTimeout = 5 * time.Second

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// drainError says what the drain left, or nil.
func (r *relay) drainError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.left) == 0 && len(r.unreleased) == 0 {
		return nil
	}
	var parts []string
	if n := len(r.left); n > 0 {
		parts = append(parts, fmt.Sprintf("%d %s still being created or cancelled when it ended (Config.RelayDrainTimeout %s, or Close's context): %s",
			n, plural(n, "intent was", "intents were"), r.d.cfg.RelayDrainTimeout, idList(r.left)))
	}
	if n := len(r.unreleased); n > 0 {
		parts = append(parts, fmt.Sprintf("%d %s claimed and not in flight could not be released: %s",
			n, plural(n, "intent", "intents"), idList(r.unreleased)))
	}
	return fmt.Errorf("cloudtasks: close: the relay's drain left claims: %s; unless finished meanwhile they stay claimed until %s, "+
		"when another relay takes them (its create finds a task this one made; Recover leaves IDs with an intent to the relays)",
		strings.Join(parts, "; "), r.claimsExpire.UTC().Format(time.RFC3339))
}

// idList names up to three intents' IDs, then how many more.
func idList(ins []outbox.Intent) string {
	const most = 3
	ids := make([]string, 0, most)
	for i, in := range ins {
		if i == most {
			return strings.Join(ids, ", ") + fmt.Sprintf(" and %d more", len(ins)-most)
		}
		ids = append(ids, in.ID)
	}
	return strings.Join(ids, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// loop runs passes until close: at once when nudged (by WaitOutcome or
// the listener), after RelayInterval otherwise.
func (r *relay) loop(ctx context.Context) {
	defer close(r.done)
	d := r.d
	failing := false // logged once per run of failed passes, not every interval
	for {
		st, err := r.pass(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			d.log.WarnContext(ctx, "relay passes fail; trying again every interval and when the listener reconnects", "err", err)
		case err == nil && failing:
			failing = false
			d.log.InfoContext(ctx, "relay passes work again")
		}
		if st.Claimed > 0 && d.log.Enabled(ctx, slog.LevelDebug) {
			d.log.DebugContext(ctx, "relay pass", "claimed", st.Claimed, "created", st.Created, "errors", st.Errors)
		}
		select {
		case <-r.stopping:
			return
		case <-r.wake:
		case <-d.clock.After(d.cfg.RelayInterval):
		}
	}
}

// Relay runs one relay pass: it claims the committed intents of
// Config.RelayQueues (those of DispatchTx, ScheduleTimerTx and CancelTx
// calls, from any process on the outbox's database), a batch of up to 64
// at a time for Config.RelayClaim, and for each creates the task outside
// any transaction, Config.RelayConcurrency at once, and records the
// outcome over the intent's pending record with a conditional append.
// Several relays share the intents through their claims (FOR UPDATE SKIP
// LOCKED in pgbox), and the conditional append keeps one outcome per
// version whoever else writes; an ID that moved on since its intent is
// dropped without a call. An intent whose create Cloud Tasks did not
// answer keeps its claim until it expires, which spaces the next try; one
// the outbox failed is released at the next pass, which so takes it again
// as soon as the database answers. NewDispatcher starts a loop of passes
// itself (see Config.NoRelay, Config.Listener and Config.RelayInterval),
// which Close drains (Config.RelayDrainTimeout); call Relay to run one
// pass now, as "ctdispatch relay --once" does.
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

// pass is Relay's work: claim a batch, start it, and again while batches
// come full. The next batch is claimed as soon as the last intent of the
// one before has started, so that calls go on while it is claimed. Once
// the relay is stopping it claims nothing more. It returns when every
// intent it started has ended.
func (r *relay) pass(ctx context.Context) (RelayStats, error) {
	d := r.d
	if r.store == nil || len(r.queues) == 0 {
		return RelayStats{}, nil
	}
	w := &passWork{slots: make(chan struct{}, d.cfg.RelayConcurrency)}
	err := r.claimAndStart(ctx, w)
	w.wg.Wait()
	return w.st, err
}

// claimAndStart is pass's loop of claims.
func (r *relay) claimAndStart(ctx context.Context, w *passWork) error {
	d := r.d
	for !r.isStopping() {
		if err := r.releaseHeld(ctx, false); err != nil {
			return err
		}
		expires := d.clock.Now().Add(d.cfg.RelayClaim)
		ins, err := r.store.ClaimIntents(ctx, r.queues, relayBatch, d.cfg.RelayClaim)
		if err != nil {
			return &OutboxError{Op: OpClaimIntents, BeforeCall: true, Err: err}
		}
		w.add(func(st *RelayStats) { st.Claimed += len(ins) })
		r.work(ctx, w, ins, expires)
		if len(ins) < relayBatch || ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// passWork is what the intents of one pass share: the slots that bound
// their calls in flight, and the counts of what they did.
type passWork struct {
	slots chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex // guards st
	st    RelayStats
}

// add updates the pass's counts.
func (w *passWork) add(f func(st *RelayStats)) {
	w.mu.Lock()
	f(&w.st)
	w.mu.Unlock()
}

// releaseHeld releases the held intents whose claims have not expired:
// those an outbox error stopped, or all of them when the relay stops.
func (r *relay) releaseHeld(ctx context.Context, all bool) error {
	now := r.d.clock.Now()
	r.mu.Lock()
	r.held = slices.DeleteFunc(r.held, func(h held) bool { return !h.expires.After(now) })
	var ins []outbox.Intent
	for _, h := range r.held {
		if all || h.retryNow {
			ins = append(ins, h.in)
		}
	}
	r.mu.Unlock()
	if len(ins) == 0 {
		return nil
	}
	if err := r.store.ReleaseIntents(ctx, ins); err != nil {
		return &OutboxError{Op: OpClaimIntents, BeforeCall: true, Err: err}
	}
	r.mu.Lock()
	r.held = slices.DeleteFunc(r.held, func(h held) bool {
		return slices.ContainsFunc(ins, func(in outbox.Intent) bool { return in.ID == h.in.ID })
	})
	r.mu.Unlock()
	return nil
}

// work starts the claimed intents ins, each once one of w's slots is
// free, and counts what each did in w; it returns once each has started
// (w.wg waits for them to end). A slot is held from an intent's start
// until its CreateTask (or cancel) call has ended: Config.RelayConcurrency
// bounds the calls in flight, and the outcome's record and the intent's
// drop that follow hold none. Once the relay is stopping it starts no
// more, and releases those it did not start at once, so that another
// relay takes them during the drain. An intent that ends in an error is
// held; one still in flight when ctx ends (at the drain's bound) is kept
// in left. Their claims expire at expires.
func (r *relay) work(ctx context.Context, w *passWork, ins []outbox.Intent, expires time.Time) {
	started := 0
	for _, in := range ins {
		select {
		case w.slots <- struct{}{}:
		case <-r.stopping:
		}
		if r.isStopping() {
			break
		}
		started++
		free := sync.OnceFunc(func() { <-w.slots })
		w.wg.Go(func() {
			defer free()
			s, err := r.one(ctx, in, free)
			w.add(func(st *RelayStats) { st.count(s, err) })
			r.ended(ctx, in, expires, err)
		})
	}
	if rest := ins[started:]; len(rest) > 0 {
		// The drain's bound is for the calls in flight, not for this:
		// a release cut short by it would leave these claimed for
		// nothing until their claims expire.
		release, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		err := r.store.ReleaseIntents(release, rest)
		cancel()
		if err != nil {
			r.d.log.WarnContext(ctx, "relay: stopping, and the intents it had not started could not be released", "intents", len(rest), "err", err)
			r.mu.Lock()
			r.unreleased = append(r.unreleased, rest...)
			r.claimsExpire = later(r.claimsExpire, expires)
			r.mu.Unlock()
		}
	}
}

// ended keeps what an intent's error says of its claim: held after an
// error (released before the next claim when the outbox failed), or left
// when the drain's bound cut it short.
func (r *relay) ended(ctx context.Context, in outbox.Intent, expires time.Time, err error) {
	var oe *OutboxError
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		if !r.isStopping() {
			return // a Relay call's context: its flight goes on and drops the intent
		}
		r.left = append(r.left, in)
		r.claimsExpire = later(r.claimsExpire, expires)
	default:
		r.held = append(r.held, held{in: in, expires: expires, retryNow: errors.As(err, &oe)})
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
// on. It calls free once its call has ended (or is not to be made).
func (r *relay) one(ctx context.Context, in outbox.Intent, free func()) (outbox.Status, error) {
	if in.Delete {
		return r.cancel(ctx, in)
	}
	d := r.d
	f, _, err := d.flights.do(ctx, in.ID, opRelay, func(f *flight) { r.create(ctx, f, in, free) })
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
	}
	derr := r.drop(ctx, in)
	r.outcome()
	if derr != nil {
		return "", derr
	}
	if err != nil {
		return "", err
	}
	return outbox.StatusCancelled, nil
}

// create is the work of a relay flight: if the intent's pending record is
// still the ID's latest, create the task and record the outcome (by
// onCreate, as Dispatch does), then drop the intent (in the outcome's
// write when the store can). It calls free once the call has ended.
func (r *relay) create(leader context.Context, f *flight, in outbox.Intent, free func()) {
	ctx, d := workContext(leader), r.d
	prev, found, err := d.box.Latest(ctx, in.Table, in.ID)
	if err != nil {
		f.err = &OutboxError{ID: in.ID, Op: OpRead, BeforeCall: true, Err: err}
		return
	}
	if !found || prev.Version != in.Version || prev.Status != outbox.StatusPending {
		f.err = r.drop(ctx, in)
		r.outcome()
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
	free()
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
	dropped, err := r.record(ctx, rec, in)
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
	if d.log.Enabled(ctx, slog.LevelDebug) {
		d.log.DebugContext(ctx, "relayed", "id", in.ID, "status", rec.Status, "calls", calls)
	}
	if !dropped {
		f.err = r.drop(ctx, in)
	}
	r.outcome()
}

// record appends rec, the outcome of in, and waits until it is kept. When
// the store appends outcomes (outbox.OutcomeAppender) the same write drops
// in, and dropped is true whenever the append was kept or refused as
// overtaken; otherwise the caller drops in.
func (r *relay) record(ctx context.Context, rec outbox.Record, in outbox.Intent) (dropped bool, err error) {
	if oa, ok := r.store.(outbox.OutcomeAppender); ok {
		return true, oa.AppendOutcome(ctx, rec, in)
	}
	return false, outbox.AppendAndWait(ctx, r.d.box, rec)
}

// drop removes a finished intent.
func (r *relay) drop(ctx context.Context, in outbox.Intent) error {
	if err := r.store.DropIntent(ctx, in); err != nil {
		return &OutboxError{ID: in.ID, Op: OpClaimIntents, Err: err}
	}
	return nil
}

// outcome tells this process's waiters, and through the announcer other
// processes', that an outcome is recorded and its intent gone: WaitOutcome
// waits for both.
func (r *relay) outcome() {
	r.recorded()
	select {
	case r.announce <- struct{}{}:
	default:
	}
}

// WaitOutcome waits until the latest record of id (a dispatch or timer ID)
// is no longer pending and no intent of the ID waits for a relay, and
// returns it: created, already_existed or failed (with its gRPC code in
// ErrorCode) once a relay has created the task of a committed DispatchTx
// or ScheduleTimerTx, cancelled once it has carried out a CancelTx, or
// whatever a Dispatch, Cancel or Recover recorded meanwhile. It wakes this
// dispatcher's relay, and reads the outbox again whenever a relay of this
// process records an outcome, whenever Config.Listener hears that a relay
// of any process did (relays notify when they record outcomes), and every
// Config.RelayInterval, which finds what no notification announced.
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
