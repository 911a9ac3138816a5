package cloudtasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ctdispatch/ctdispatch/cloudtasks/internal/tracing"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Outcome says how a dispatch or timer ended. Every outcome is a success:
// the task exists exactly once (for OutcomeQueued, once the caller's
// transaction commits).
type Outcome string

// The outcomes.
const (
	// OutcomeCreated means this call created the task. Exactly one call per
	// ID sees it.
	OutcomeCreated Outcome = "created"
	// OutcomeAlreadyExisted means the task existed already: a duplicate
	// call, answered from the outbox, from a concurrent identical call, or
	// by Cloud Tasks' AlreadyExists.
	OutcomeAlreadyExisted Outcome = "already_existed"
	// OutcomeRecovered means this call finished a dispatch that an earlier,
	// interrupted call left pending past Config.StaleAfter.
	OutcomeRecovered Outcome = "recovered"
	// OutcomeQueued is DispatchTx's and ScheduleTimerTx's answer: the task
	// is recorded in the caller's transaction, and a relay creates it
	// once that transaction commits (WaitOutcome waits for that). It is a
	// success only if the transaction commits.
	OutcomeQueued Outcome = "queued"
)

// DispatchResult is the answer to Dispatch (and, through the timers
// package, to ScheduleTimer).
type DispatchResult struct {
	// ID is the internal ID, for example dispatch:run1:extract:1.
	ID string
	// CloudTaskID is the Cloud Tasks task ID (d_… or t_…).
	CloudTaskID string
	// TaskName is the full task resource name.
	TaskName string
	// Outcome says what happened.
	Outcome Outcome
	// FirstRecorded is when the ID was first recorded in the outbox.
	FirstRecorded time.Time
	// Skipped is true when the recorded outcome answered without a
	// CreateTask call: read from the outbox, or from the outcome an
	// earlier identical call was still writing. An outbox that cannot read
	// every process's records (a Parquet outbox on a bucket) has the
	// record confirmed by a GetTask call first.
	Skipped bool
	// Calls counts the CreateTask calls this call made (0 when skipped or
	// shared with a concurrent identical call).
	Calls int
}

// Dispatcher hands tasks to Cloud Tasks exactly once per internal ID and
// records each in its outbox. Its methods are safe for concurrent use.
type Dispatcher struct {
	cfg      Config
	client   Client
	closeFns []func() error
	box      outbox.Outbox
	// The optional interfaces box offers, resolved once by NewDispatcher;
	// nil where it offers none.
	fresh    outbox.FreshReader
	reserver outbox.Reserver
	claimer  outbox.Claimer
	intents  outbox.Intents
	// bulk is intents' own outbox.BulkIntents, or perIDIntents over it;
	// nil when intents is.
	bulk outbox.BulkIntents
	// intentReserver is intents' own outbox.IntentReserver, or nil.
	intentReserver outbox.IntentReserver
	notices        outbox.Notices
	processor      string
	log            *slog.Logger
	clock          clockwork.Clock
	m              *metrics
	flights        flights
	batches        *batcher // nil unless Config.Batch
	relay          *relay
	tracer         *tracing.Tracer
	prop           tracing.Propagator
	// sendStarts are the producer spans' starts for the default queue.
	sendStarts sendStarts
	// unpropagated is set once a call with a span injected no trace
	// context, which is logged the first time only.
	unpropagated atomic.Bool
	// outboxOK is true once the outbox kept a record, and false again
	// after any append failed: while it is false the pending record is
	// kept before the create call, so a failing outbox stops calls
	// instead of letting tasks be created that it cannot record.
	outboxOK atomic.Bool
}

// NewDispatcher checks cfg, opens the client it names, and returns a ready
// Dispatcher that records into box: an *outbox.Memory, a
// *parquetbox.Outbox, or any other outbox.Outbox. box is the caller's: Close
// flushes it but does not close it. Errors about cfg or box match
// ErrInvalidConfig and name the field. A box that offers a check
// (outbox.Checker: a *pgbox.Outbox checks that its tables exist) is
// checked once, unless Config.SkipOutboxCheck: an answer that it cannot
// keep records (outbox.ErrNotReady) is returned, wrapped; a check that
// could not be made (the database not reached) is logged, and the calls
// fail with ErrOutboxUnavailable until the outbox answers.
func NewDispatcher(ctx context.Context, box outbox.Outbox, cfg *Config) (*Dispatcher, error) {
	if box == nil {
		return nil, &ConfigError{Field: fieldOutbox, Value: "nil",
			Rule: "is required: pass outbox.NewMemory(clock) to keep records in this process, or a *parquetbox.Outbox to keep them in Parquet files"}
	}
	if cfg == nil {
		cfg = &Config{}
	}
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if ch, ok := box.(outbox.Checker); ok && !c.SkipOutboxCheck {
		switch err := ch.Check(ctx); {
		case errors.Is(err, outbox.ErrNotReady):
			return nil, fmt.Errorf("cloudtasks: the outbox cannot keep records (Config.SkipOutboxCheck starts the dispatcher anyway): %w", err)
		case err != nil:
			// Not an answer: the calls fail closed until the outbox can be
			// reached, as they would at any other time.
			c.Logger.Warn("cannot check the outbox; starting, and calls fail until it answers", "err", err)
		}
	}
	d := &Dispatcher{cfg: c, box: box, processor: box.ProcessorUUID(), clock: c.Clock,
		log: slog.New(tracing.LogHandler(c.Logger.Handler())), tracer: tracing.NewTracer(c.TracerProvider), prop: tracing.NewPropagator(c.Propagator)}
	d.fresh, _ = box.(outbox.FreshReader)
	d.reserver, _ = box.(outbox.Reserver)
	d.claimer, _ = box.(outbox.Claimer)
	d.intents, _ = box.(outbox.Intents)
	if d.intents != nil {
		d.intentReserver, _ = box.(outbox.IntentReserver)
	}
	if b, ok := box.(outbox.BulkIntents); ok && d.intents != nil {
		d.bulk = b
	} else if d.intents != nil {
		d.bulk = perIDIntents{d.intents}
	}
	if n, ok := box.(outbox.Notices); ok && n.NoticeChannel() != "" {
		d.notices = n
	}
	if c.Listener != nil && d.notices == nil {
		return nil, &ConfigError{Field: "Listener", Value: fmt.Sprintf("%T", c.Listener),
			Rule: fmt.Sprintf("is set, but the outbox (%T) sends no notifications to listen for; it needs one that implements outbox.Notices (outbox/pgbox without Config.NoNotify)", box)}
	}
	m, err := newMetrics(c.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("cloudtasks: metrics: %w", err)
	}
	d.m = m
	d.sendStarts = newSendStarts(d.queueOf(""))
	if c.Client != nil {
		d.client = c.Client
	} else {
		opts := c.ClientOptions
		if c.EmulatorAddr != "" {
			opts = []option.ClientOption{
				option.WithEndpoint(c.EmulatorAddr),
				option.WithoutAuthentication(),
				option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			}
		}
		// The dispatcher's attempt spans and events stand for the client
		// spans of its calls; the client's own, under the global
		// provider, would repeat each of them (ADR 0014).
		opts = append(opts[:len(opts):len(opts)], option.WithTelemetryDisabled())
		cl, err := ctapi.NewClient(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("cloudtasks: open client: %w", err)
		}
		d.client = cl
		d.closeFns = append(d.closeFns, cl.Close)
	}
	if c.Batch {
		d.batches = newBatcher(d, c.BatchInFlight)
	}
	d.relay = newRelay(d)
	d.relay.start()
	d.announce(ctx)
	return d, nil
}

// ProcessorUUID returns the UUID this dispatcher writes into its records:
// its outbox's.
func (d *Dispatcher) ProcessorUUID() string { return d.processor }

// Close drains the relay (it claims no more intents, releases those it
// claimed and did not start, and lets its calls in flight finish within
// Config.RelayDrainTimeout), then stops new calls (they fail with
// ErrClosed), waits within ctx for the calls in flight to finish and
// record their outcomes, flushes the outbox (parquetbox rolls its log
// into Parquet) and closes the client if the dispatcher opened it. The
// outbox stays open: it is the caller's. The error says what could not be
// finished: how many calls were still in flight when ctx ended (their
// records stay pending for Recover), and which intents the relay still
// held (they stay claimed for Config.RelayClaim, then another relay takes
// them). A second Close returns nil.
func (d *Dispatcher) Close(ctx context.Context) error {
	if d.flights.isClosed() {
		return nil
	}
	var errs []error
	if err := d.relay.close(ctx); err != nil {
		errs = append(errs, err)
	}
	// The relay's calls that outlasted its drain are named by its error,
	// and not waited for.
	if err := wait(ctx, d.flights.close()); err != nil {
		errs = append(errs, fmt.Errorf("cloudtasks: close: %d calls still in flight (their records stay pending for Recover): %w", d.flights.inFlightButRelay(), err))
	}
	if err := d.box.Flush(ctx); err != nil {
		errs = append(errs, fmt.Errorf("cloudtasks: close: flush the outbox: %w", err))
	}
	errs = append(errs, d.closeOwned())
	return errors.Join(errs...)
}

// closeOwned closes what NewDispatcher opened.
func (d *Dispatcher) closeOwned() error {
	var errs []error
	for _, fn := range d.closeFns {
		if err := fn(); err != nil {
			errs = append(errs, fmt.Errorf("cloudtasks: close: %w", err))
		}
	}
	d.closeFns = nil
	return errors.Join(errs...)
}

// queueOf returns the full resource name of a queue ID; an empty ID
// means the default queue.
func (d *Dispatcher) queueOf(queue string) string {
	if queue == "" {
		queue = d.cfg.Queue
	}
	return d.cfg.queuePath(queue)
}

// Dispatch hands one attempt of a task to Cloud Tasks under its
// deterministic name, at most once per internal ID. Repeating the call —
// after a crash, a timeout or concurrently — returns the same task with
// outcome already_existed (or recovered) instead of creating a second one.
//
// Errors: *RequestError (ErrInvalidRequest) before any I/O; *ConflictError
// (ErrPayloadConflict) for an ID recorded with another body;
// *OwnershipError (ErrNotOwner); *NameHeldError (ErrNameHeld) for an ID
// whose task a Cancel deleted, while the service still holds its name;
// *CallError matching ErrCreateFailed for a permanent gRPC code (recorded
// as failed; the ID may be dispatched again) or ErrGaveUp when transient
// errors outlasted the retry policy (the record stays pending; call again
// or let Recover finish it); *WaitError when ctx ended first (ErrNotStarted
// if nothing was started, ErrStoppedWaiting if the work goes on);
// *OutboxError (ErrOutboxUnavailable) when the outbox could not read or
// record (its Op and BeforeCall say what and whether a call was made);
// *IndeterminateError (ErrIndeterminate) when the outbox and Cloud Tasks
// together cannot decide the answer (see docs/consistency.md), including
// a lost answer to the pending record (UnknownPendingRecord, which
// matches ErrOutboxUnavailable too).
func (d *Dispatcher) Dispatch(ctx context.Context, req DispatchRequest) (DispatchResult, error) {
	id, err := req.ID()
	if err != nil {
		return DispatchResult{}, err
	}
	return d.submit(ctx, id, &req.Task)
}

// submit creates the task named by id (a dispatch or timer ID) with the
// semantics of Dispatch, under its producer span. A timer's record goes
// to the timers table.
func (d *Dispatcher) submit(ctx context.Context, id naming.ID, t *Task) (DispatchResult, error) {
	start := d.clock.Now()
	if err := t.validate(start); err != nil {
		return DispatchResult{}, err
	}
	if t.Queue == "" && d.cfg.Queue == "" {
		return DispatchResult{}, &RequestError{Field: "Task.Queue", Rule: "is required: Config.Queue names no default queue"}
	}
	queuePath := d.queueOf(t.Queue)
	ctx, span := d.startSend(ctx, id, queuePath)
	res, err := d.send(ctx, id, t, queuePath, start)
	endSend(span, id, &res, err)
	return res, err
}

// send is submit's work for a valid task to the queue at queuePath.
func (d *Dispatcher) send(ctx context.Context, id naming.ID, t *Task, queuePath string, start time.Time) (DispatchResult, error) {
	req := t.createRequest(id, queuePath, start)
	if err := d.injectTrace(ctx, t, req); err != nil {
		return DispatchResult{}, err
	}
	if err := t.checkSize(req); err != nil {
		return DispatchResult{}, err
	}
	key, kind := id.String(), id.Kind().String()
	if err := ctx.Err(); err != nil {
		return DispatchResult{}, &WaitError{ID: key, Op: "create", Err: err}
	}
	fp := naming.PayloadFingerprint(t.Body)
	for {
		f, how, err := d.flights.do(ctx, key, opCreate, func(f *flight) {
			f.fp = fp
			d.create(ctx, f, id, t, req, start)
		})
		switch {
		case errors.Is(err, ErrClosed):
			return DispatchResult{}, err
		case err != nil:
			d.m.outcome(ctx, kind, "gave_up", d.clock.Since(start))
			return DispatchResult{}, &WaitError{ID: key, Op: "create", Started: f != nil, Err: err}
		}
		res := f.res
		if how != ledFlight {
			// A concurrent call of the same ID did the work; this one is
			// its duplicate.
			linkLeader(ctx, f)
			if f.recorded != "" && f.recorded == fp {
				// The leader's payload conflicted with the record, and this
				// call's matches it: it is not a conflict, so ask again once
				// that flight is over.
				if err := wait(ctx, f.done); err != nil {
					return DispatchResult{}, &WaitError{ID: key, Op: "create", Started: true, Err: err}
				}
				continue
			}
			if f.fp != fp {
				d.m.conflicts.Add(ctx, 1)
				d.log.WarnContext(ctx, "payload conflict with a concurrent call", "id", key)
				return DispatchResult{}, &ConflictError{ID: key, Recorded: f.fp, Given: fp}
			}
			if res.Outcome == OutcomeCreated || res.Outcome == OutcomeRecovered {
				res.Outcome = OutcomeAlreadyExisted
			}
			res.Calls = 0
		}
		if f.err != nil {
			d.m.outcome(ctx, kind, failureOutcome(f.err), d.clock.Since(start))
			return DispatchResult{}, f.err
		}
		d.m.outcome(ctx, kind, string(res.Outcome), d.clock.Since(start))
		return res, nil
	}
}

func failureOutcome(err error) string {
	switch {
	case errors.Is(err, ErrCreateFailed):
		return "failed"
	case errors.Is(err, ErrGaveUp):
		return "gave_up"
	case errors.Is(err, ErrPayloadConflict):
		return "conflict"
	case errors.Is(err, ErrNameHeld):
		return "name_held"
	case errors.Is(err, ErrOutboxUnavailable):
		return "outbox_unavailable"
	case errors.Is(err, ErrIndeterminate):
		return "indeterminate"
	}
	return "error"
}

// workContext is the context of a flight's work: the leader's values
// without its cancellation. The retry loop bounds the work by
// Retry.MaxElapsed. A context that cannot end is used as it is.
func workContext(leader context.Context) context.Context {
	if leader.Done() == nil {
		return leader
	}
	return context.WithoutCancel(leader)
}

// recordOf is the record of id in the queue at queuePath, with the fields
// every status shares.
func recordOf(id naming.ID, queuePath string) outbox.Record {
	rec := outbox.RecordOf(id)
	rec.Queue = queuePath
	return rec
}

// rereads bounds how often a create re-reads the outbox after another
// process wrote the version it meant to write: each re-read answers from
// a newer winner, so more than a few means writers race without end.
const rereads = 3

// create is the work of one create flight: consult the outbox, record
// pending, create the task, record the outcome. It answers f's callers as
// soon as the mode allows, then finishes recording. req is t's create
// request in the queue t names (or the default queue). When another
// process records the ID first (the pending record's version is taken),
// it reads again and answers from the winner's record instead of writing
// blind.
func (d *Dispatcher) create(leader context.Context, f *flight, id naming.ID, t *Task, req *cloudtaskspb.CreateTaskRequest, now time.Time) {
	ctx := workContext(leader)
	f.span = trace.SpanContextFromContext(ctx)
	for i := 0; d.createOnce(ctx, f, id, t, req, now) && i < rereads; i++ {
		// f.err holds the refusal, kept if this was the last try.
		f.err, f.res, f.recovering, now = nil, DispatchResult{}, false, d.clock.Now()
	}
}

// createOnce is one try of create. It reports whether the pending record
// was refused because another process wrote its version first, with
// nothing called; f.err then holds the refusal.
func (d *Dispatcher) createOnce(ctx context.Context, f *flight, id naming.ID, t *Task, req *cloudtaskspb.CreateTaskRequest, now time.Time) (again bool) {
	key := id.String()
	prev, found, reserved, unseen, err := d.reserve(ctx, f, id, req, now)
	switch {
	case errors.Is(err, outbox.ErrConcurrentWrites):
		d.blindWrites(ctx, f, id, req, now, err)
		return false
	case err != nil:
		f.err = readError(key, err)
		return false
	}
	if found {
		if req, err = d.requestFor(ctx, id, t, req, &prev, now); err != nil {
			f.err = err
			return false
		}
	}
	f.res = DispatchResult{ID: key, CloudTaskID: id.CloudTaskID(), TaskName: req.GetTask().GetName()}
	rec := d.pendingRecord(ctx, f, id, req)
	if found {
		linkStored(ctx, &prev)
		if d.answeredByRecord(ctx, f, id, req.GetTask(), &prev, now, unseen) {
			return false
		}
		rec.CreateCalls = prev.CreateCalls
		rec.Follow(&prev, now)
	} else {
		rec.Follow(nil, now)
	}
	calls, err, perr := d.pendingWithCall(ctx, rec, reserved, func(ctx context.Context) (int, error) {
		return d.call(ctx, "CreateTask", codes.AlreadyExists, func(ctx context.Context) error {
			return d.createTask(ctx, key, req)
		})
	})
	if perr != nil {
		f.err = perr
		var oe *OutboxError
		return errors.Is(perr, outbox.ErrVersionConflict) && errors.As(perr, &oe) && oe.BeforeCall
	}
	f.res.Calls = calls
	rec.CreateCalls += int32(calls)
	var before *outbox.Record
	if found {
		before = &prev
	}
	d.recordCreate(ctx, f, id, rec, before, req.GetTask(), now, err)
	return false
}

// answeredByRecord decides a create of an ID the outbox holds as prev by
// onRecord, and reports whether that answered it without a call (f holds
// the answer or the error). A record that says the task exists is
// confirmed by GetTask first when the store's read may miss another
// process's cancel (unseen > 0).
func (d *Dispatcher) answeredByRecord(ctx context.Context, f *flight, id naming.ID, task *cloudtaskspb.Task, prev *outbox.Record, now time.Time, unseen time.Duration) bool {
	key := id.String()
	switch onRecord(prev, f.fp, d.processor, d.cfg.EnforceOwnership) {
	case repeatConflict:
		f.recorded = prev.PayloadSHA256
		f.err = d.conflict(ctx, prev, f.fp)
	case repeatNotOwner:
		f.err = &OwnershipError{ID: key, Owner: prev.ProcessorUUID}
	case repeatSkip:
		if unseen > 0 && !d.confirmExisted(ctx, f, id, task, now, unseen) {
			return true
		}
		d.m.kindCount(ctx, d.m.skips, id.Kind().String())
		d.log.DebugContext(ctx, "idempotent skip: already dispatched", "id", key, "status", prev.Status)
		f.res.Outcome, f.res.FirstRecorded, f.res.Skipped = OutcomeAlreadyExisted, prev.CreatedAt, true
	default:
		f.recovering = recovers(prev, now, d.cfg.StaleAfter)
		return false
	}
	return true
}

// conflict counts and logs a create whose payload fingerprint fp differs
// from the one recorded in prev, and returns its error.
func (d *Dispatcher) conflict(ctx context.Context, prev *outbox.Record, fp string) error {
	d.m.conflicts.Add(ctx, 1)
	d.log.WarnContext(ctx, "payload conflict with the recorded dispatch", "id", prev.ID, "status", prev.Status)
	return &ConflictError{ID: prev.ID, Recorded: prev.PayloadSHA256, Given: fp}
}

// recordCreate records what the create calls of rec's ID answered (err),
// as onCreate reads it, and sets f's answer. prev is the ID's record
// before the call, nil when it had none: an ALREADY_EXISTS after a cancel
// may mean the name is held, not that the task exists.
func (d *Dispatcher) recordCreate(ctx context.Context, f *flight, id naming.ID, rec outbox.Record, prev *outbox.Record, task *cloudtaskspb.Task, now time.Time, err error) {
	key, calls := id.String(), f.res.Calls
	v := onCreate(err, ctx.Err() != nil)
	if v.status == outbox.StatusAlreadyExisted && prev != nil && (d.nameHeld(ctx, f, prev, now) ||
		prev.Status != outbox.StatusCreated && prev.Status != outbox.StatusAlreadyExisted && d.goneButHeld(ctx, f, key, task, now)) {
		// The name is held since a Cancel deleted the task (known from the
		// record, or, when no cancel is readable yet, from a task gone
		// before its schedule time): no task exists, and none will until
		// the hold ends. The record says cancelled again, marked so that
		// the next call knows why.
		rec.Status, rec.ErrorCode = outbox.StatusCancelled, codes.AlreadyExists.String()
		d.recordOutcome(ctx, f, rec)
		return
	}
	switch v.status {
	case "":
		// The outcome is unknown (the task may exist): the record stays
		// pending, now with the calls made, for Recover or the caller's
		// repeat.
		d.log.InfoContext(ctx, "gave up; outcome unknown, record left pending", "id", key, "code", v.code.String(), "calls", calls)
		rec.ErrorCode = v.code.String()
		f.err = &CallError{ID: key, Method: "CreateTask", Code: v.code, Calls: calls, Transient: true, Err: err}
		d.recordOutcome(ctx, f, rec)
		return
	case outbox.StatusFailed:
		rec.Status, rec.ErrorCode = outbox.StatusFailed, v.code.String()
		d.log.InfoContext(ctx, "CreateTask failed", "id", key, "code", v.code.String(), "calls", calls)
		f.err = &CallError{ID: key, Method: "CreateTask", Code: v.code, Calls: calls, Err: err}
		d.recordOutcome(ctx, f, rec)
		return
	}
	rec.Status, f.res.Outcome = v.status, Outcome(v.status)
	if f.recovering {
		f.res.Outcome = OutcomeRecovered
		d.m.recovered.Add(ctx, 1, metricAttrs(id.Kind().String(), "dispatch"))
		d.noteHandover(ctx, id, prev.ProcessorUUID, "dispatch")
	}
	f.res.FirstRecorded = rec.CreatedAt
	if d.log.Enabled(ctx, slog.LevelDebug) { // spares boxing the arguments of a line nobody reads
		d.log.DebugContext(ctx, "dispatched", "id", key, "outcome", f.res.Outcome, "calls", calls)
	}
	d.recordOutcome(ctx, f, rec)
}

// requestFor is the create request of an ID the outbox recorded as prev:
// req itself, or req rebuilt for the queue prev names (see
// inRecordedQueue), with the trace and the size check req had.
func (d *Dispatcher) requestFor(ctx context.Context, id naming.ID, t *Task, req *cloudtaskspb.CreateTaskRequest, prev *outbox.Record, now time.Time) (*cloudtaskspb.CreateTaskRequest, error) {
	rebuilt, err := d.inRecordedQueue(id, t, req, *prev, now)
	if err != nil || rebuilt == req {
		return rebuilt, err
	}
	if err := d.injectTrace(ctx, t, rebuilt); err != nil {
		return nil, err
	}
	if err := t.checkSize(rebuilt); err != nil {
		return nil, err
	}
	return rebuilt, nil
}

// latest reads the outbox's newest record of id. A record that would
// answer the call without a create (created or already_existed) is read
// again as fresh as the store allows (outbox.FreshReader), so that a
// cancel another process recorded since this process last looked is
// seen; unseen is then the store's bound on what even that read cannot
// see (0 for stores whose Latest sees every record). Any other record
// leads to a create call, whose answer does not rest on the read alone,
// and spares the fresher read.
func (d *Dispatcher) latest(ctx context.Context, id naming.ID) (prev outbox.Record, found bool, unseen time.Duration, err error) {
	t, key := outbox.TableOf(id), id.String()
	prev, found, err = d.box.Latest(ctx, t, key)
	if err != nil || !found || d.fresh == nil || (prev.Status != outbox.StatusCreated && prev.Status != outbox.StatusAlreadyExisted) {
		return prev, found, 0, err
	}
	return d.fresh.LatestFresh(ctx, t, key)
}

// confirmExisted decides a repeat that the outbox would answer
// already_existed, when the store may not see another process's cancel
// (unseen > 0): GetTask does. It reports true when the answer stands: the
// task exists, or it is gone after its schedule time and a delivery the
// worker answered with 2xx is recorded (it ran and completed). Otherwise
// f gets the answer: a held name when the task is gone before its
// schedule time (it cannot have run, so it was deleted), and an
// *IndeterminateError naming what is unknown when GetTask fails or the
// task is gone after its time with no completed delivery recorded (it
// ran, or a cancel not yet readable here deleted it).
func (d *Dispatcher) confirmExisted(ctx context.Context, f *flight, id naming.ID, task *cloudtaskspb.Task, now time.Time, unseen time.Duration) bool {
	key, name := id.String(), task.GetName()
	err := d.getTask(ctx, name)
	switch {
	case err == nil:
		return true
	case codeOf(err) != codes.NotFound:
		f.err = &IndeterminateError{ID: key, Unknown: UnknownTaskExists, Err: err}
		return false
	}
	if st := task.GetScheduleTime(); st != nil && now.Before(st.AsTime()) {
		f.err = &NameHeldError{ID: key, HeldUntil: now.Add(d.cfg.NameHold)}
		d.log.InfoContext(ctx, "name held: the recorded task is gone before its schedule time", "id", key)
		return false
	}
	ran, lerr := completedDelivery(ctx, d.box, key)
	if ran {
		return true
	}
	f.err = &IndeterminateError{ID: key, Unknown: UnknownDeletion, Err: errors.Join(fmt.Errorf(
		"task %s is gone after its schedule time, no completed delivery of it is recorded, and another process's cancel may stay unreadable here for up to %s",
		name, unseen), lerr)}
	return false
}

// completedDelivery reports whether the outbox records a delivery of id's
// task that the worker answered with 2xx: Cloud Tasks then deleted the
// task because it completed, not because a cancel did.
func completedDelivery(ctx context.Context, box outbox.Outbox, id string) (bool, error) {
	recs, err := outbox.LookupDeliveries(ctx, box, outbox.Query{ID: id})
	for _, r := range recs {
		if r.Delivery.HTTPStatus >= 200 && r.Delivery.HTTPStatus < 300 {
			return true, nil
		}
	}
	if err != nil {
		return false, fmt.Errorf("read deliveries: %w", err)
	}
	return false, nil
}

// inRecordedQueue returns the create request of an ID the outbox already
// recorded (prev), in the recorded queue: an ID's task lives in one queue,
// the one of its first record, whatever the request or a redeployed
// default queue says, so a repeat never makes a second task elsewhere. A
// Task.Queue naming another queue is a *RequestError naming both; an
// empty one takes the recorded queue.
func (d *Dispatcher) inRecordedQueue(id naming.ID, t *Task, req *cloudtaskspb.CreateTaskRequest, prev outbox.Record, now time.Time) (*cloudtaskspb.CreateTaskRequest, error) {
	if prev.Queue == "" || prev.Queue == req.GetParent() {
		return req, nil
	}
	if t.Queue != "" {
		return nil, &RequestError{Field: "Task.Queue", Value: t.Queue,
			Rule: fmt.Sprintf("names queue %s, but the outbox recorded %s in queue %s; leave it empty or name that queue (another queue needs another attempt)",
				req.GetParent(), id, prev.Queue)}
	}
	req = t.createRequest(id, prev.Queue, now)
	if err := t.checkSize(req); err != nil {
		return nil, err
	}
	return req, nil
}

// createTask makes one create call, alone or in a shared batch.
func (d *Dispatcher) createTask(ctx context.Context, key string, req *cloudtaskspb.CreateTaskRequest) error {
	if d.batches != nil {
		return d.batches.create(ctx, key, req)
	}
	return d.createOne(ctx, key, req)
}

// createOne makes one CreateTask call.
func (d *Dispatcher) createOne(ctx context.Context, key string, req *cloudtaskspb.CreateTaskRequest) error {
	_, err := d.client.CreateTask(ctx, req)
	code := codeOf(err)
	d.m.call(ctx, "CreateTask", code)
	if err != nil && code != codes.AlreadyExists {
		d.log.DebugContext(ctx, "CreateTask error", "id", key, "code", code.String())
	}
	return err
}

// pendingWithCall records rec (pending) and runs call, in the order and
// overlap the durability mode asks for; when reserved, rec is kept already
// (by reserve) and only call runs. perr is an *OutboxError when the
// pending record could not be written; then either call did not run, or
// (overlapped) its answer must not be given.
func (d *Dispatcher) pendingWithCall(ctx context.Context, rec outbox.Record, reserved bool, call func(context.Context) (int, error)) (calls int, err, perr error) {
	ok := d.outboxOK.Load()
	switch {
	case reserved:
	case !ok:
		// Until the outbox has shown it can keep a record, the pending
		// record is waited for, so a broken outbox stops the call.
		if err := outbox.AppendAndWait(ctx, d.box, rec); err != nil {
			return 0, nil, d.outboxFailed(rec.ID, true, err)
		}
		if d.cfg.Durability != DurabilityStrict {
			d.outboxOK.Store(true)
		}
	case d.cfg.Durability == DurabilityStrict:
		// Strict mode needs only the pending record to be queued before
		// the call: the durable outcome comes after it in the log.
		if err := d.box.Append(ctx, rec, nil); err != nil {
			return 0, nil, d.outboxFailed(rec.ID, true, err)
		}
	default:
		// The pending record is kept while the call runs; this goroutine
		// waits for it afterwards, usually finding it done.
		kept := make(chan error, 1)
		if err := d.box.Append(ctx, rec, func(err error) { kept <- err }); err != nil {
			return 0, nil, d.outboxFailed(rec.ID, true, err)
		}
		calls, err = call(ctx)
		var aerr error
		select {
		case aerr = <-kept:
		default:
			select {
			case aerr = <-kept:
			case <-ctx.Done():
				aerr = ctx.Err()
			}
		}
		if aerr != nil {
			return calls, err, d.outboxFailed(rec.ID, false, aerr)
		}
		return calls, err, nil
	}
	calls, err = call(ctx)
	return calls, err, nil
}

// outboxFailed notes that the outbox failed an append of the pending
// record and returns the error for the caller: an *OutboxError, inside an
// *IndeterminateError when the outbox lost its answer before any call
// (the record may be kept).
func (d *Dispatcher) outboxFailed(id string, beforeCall bool, err error) error {
	oe := &OutboxError{ID: id, Op: OpRecordPending, BeforeCall: beforeCall, Err: err}
	if errors.Is(err, outbox.ErrVersionConflict) {
		// The outbox works: another process recorded the ID first.
		return oe
	}
	if d.outboxOK.Swap(false) {
		d.log.Error("outbox cannot record; calls stop until it can", "id", id, "err", err)
	}
	if beforeCall && errors.Is(err, outbox.ErrKeptUnknown) {
		return &IndeterminateError{ID: id, Unknown: UnknownPendingRecord, Err: oe}
	}
	return oe
}

// recordOutcome appends rec, f's outcome, as the version after the pending
// record rec was. In strict mode the callers wait until it is kept, and a
// failure is their error; a version another process wrote meanwhile (a
// cancel, a recovery) is no failure: its record is the newer state, and
// this call's answer stands. In overlapped mode they
// are answered first and the flight stays in the table until the record
// is kept, so a repeat meanwhile waits for it instead of reading a stale
// record; the outbox's done callback takes it out of the table, so no
// goroutine waits for the record.
func (d *Dispatcher) recordOutcome(ctx context.Context, f *flight, rec outbox.Record) {
	pending := rec
	rec.Follow(&pending, d.clock.Now())
	if d.cfg.Durability == DurabilityStrict {
		err := outbox.AppendAndWait(ctx, d.box, rec)
		if errors.Is(err, outbox.ErrVersionConflict) {
			d.outcomeOvertaken(ctx, rec, err)
			return
		}
		if err != nil {
			d.outboxFailed(rec.ID, false, err)
			f.err = errors.Join(f.err, &OutboxError{ID: rec.ID, Op: OpRecordOutcome, Err: err})
			return
		}
		d.outboxOK.Store(true)
		return
	}
	f.answer()
	d.recordLater(ctx, f, rec)
}

// recordLater appends rec, the outcome of the answered flight f, and
// finishes f once it is kept. (A function of its own, so that strict
// mode's rec does not move to the heap for the closure.)
func (d *Dispatcher) recordLater(ctx context.Context, f *flight, rec outbox.Record) {
	f.later = true
	recorded := func(err error) {
		if errors.Is(err, outbox.ErrVersionConflict) && rec.Status == outbox.StatusCreated {
			// done may not call the outbox: the created record is
			// written again on a goroutine of its own.
			go func() {
				d.outcomeOvertaken(ctx, rec, err)
				d.flights.finish(rec.ID, f)
			}()
			return
		}
		d.outcomeRecorded(ctx, rec, err)
		d.flights.finish(rec.ID, f)
	}
	if err := d.box.Append(ctx, rec, recorded); err != nil {
		recorded(err)
	}
}

// outcomeRecorded notes how the outcome record of an answered call ended.
func (d *Dispatcher) outcomeRecorded(ctx context.Context, rec outbox.Record, err error) {
	if err == nil {
		d.outboxOK.Store(true)
		return
	}
	if errors.Is(err, outbox.ErrVersionConflict) {
		d.outcomeOvertaken(ctx, rec, err)
		return
	}
	d.outboxFailed(rec.ID, false, err)
	d.log.Error("outcome not recorded; the record stays pending for Recover", "id", rec.ID, "status", rec.Status, "err", err)
}

// outcomeOvertaken handles an outcome record refused because another
// process recorded a later state of the ID first. That state stands,
// except that this call's created is a fact the record must keep: when
// the later state is only another process's pending record or its
// already_existed (it raced this call's create and lost), created is
// written again after it, so the ID's history holds the one "created"
// its task had. After a cancel, a failure or a not_found, the later state
// stands as it is.
func (d *Dispatcher) outcomeOvertaken(ctx context.Context, rec outbox.Record, err error) {
	d.outboxOK.Store(true)
	for range rereads {
		var ve *outbox.VersionConflictError
		if rec.Status != outbox.StatusCreated || !errors.As(err, &ve) ||
			(ve.Current.Status != outbox.StatusPending && ve.Current.Status != outbox.StatusAlreadyExisted) {
			break
		}
		rec.Follow(&ve.Current, d.clock.Now())
		if err = outbox.AppendAndWait(ctx, d.box, rec); err == nil {
			return
		}
		if !errors.Is(err, outbox.ErrVersionConflict) {
			d.outboxFailed(rec.ID, false, err)
			d.log.ErrorContext(ctx, "created not recorded again after a newer record", "id", rec.ID, "err", err)
			return
		}
	}
	d.log.InfoContext(ctx, "outcome not recorded: another processor recorded the ID meanwhile", "id", rec.ID, "status", rec.Status, "err", err)
}

// goneButHeld asks GetTask about a task CreateTask said was taken, when
// the outbox's newest record of the ID does not say it exists (a cancel, a
// failure, a not_found, or another process's pending record) and its
// schedule time is still ahead: Cloud Tasks answers NOT_FOUND before a
// task's schedule time only when it was deleted, so its name is held and
// f gets a NameHeldError. A task whose time has come may have run (then
// the call is a repeat, already_existed); a task that exists, or a
// GetTask that fails, leaves that answer too.
func (d *Dispatcher) goneButHeld(ctx context.Context, f *flight, id string, task *cloudtaskspb.Task, now time.Time) bool {
	if !scheduledAhead(task, now) {
		return false
	}
	if codeOf(d.getTask(ctx, task.GetName())) != codes.NotFound {
		return false
	}
	f.err = &NameHeldError{ID: id, HeldUntil: now.Add(d.cfg.NameHold)}
	d.log.InfoContext(ctx, "name held: the task is gone before its schedule time but its name is taken", "id", id)
	return true
}

// blindWrites answers a create whose ID's latest version two processes
// wrote without seeing each other: GetTask decides when the task exists
// (then the call is a repeat), and when it is gone before its schedule
// time (then a cancel deleted it and its name is held, as goneButHeld
// reasons); otherwise the answer is indeterminate.
func (d *Dispatcher) blindWrites(ctx context.Context, f *flight, id naming.ID, req *cloudtaskspb.CreateTaskRequest, now time.Time, cause error) {
	task := req.GetTask()
	f.res = DispatchResult{ID: id.String(), CloudTaskID: id.CloudTaskID(), TaskName: task.GetName()}
	if recorded := recordedTaskName(cause); recorded != "" {
		f.res.TaskName = recorded
	}
	err := d.getTask(ctx, f.res.TaskName)
	switch {
	case err == nil:
		f.res.Outcome, f.res.Skipped = OutcomeAlreadyExisted, true
		return
	case codeOf(err) == codes.NotFound && scheduledAhead(task, now):
		f.err = &NameHeldError{ID: id.String(), HeldUntil: now.Add(d.cfg.NameHold)}
		return
	case codeOf(err) != codes.NotFound:
		cause = errors.Join(cause, err)
	}
	f.err = &IndeterminateError{ID: id.String(), Unknown: UnknownWriteOrder, Err: cause}
}

// scheduledAhead reports whether task's schedule time is after now.
func scheduledAhead(task *cloudtaskspb.Task, now time.Time) bool {
	st := task.GetScheduleTime()
	return st != nil && now.Before(st.AsTime())
}

// getTask makes a GetTask call under the retry policy.
func (d *Dispatcher) getTask(ctx context.Context, name string) error {
	_, err := d.call(ctx, "GetTask", codes.NotFound, func(ctx context.Context) error {
		_, err := d.client.GetTask(ctx, &cloudtaskspb.GetTaskRequest{Name: name})
		d.m.call(ctx, "GetTask", codeOf(err))
		return err
	})
	return err
}

// noteHandover logs and counts a record finished by a processor other than
// the one that left it pending.
func (d *Dispatcher) noteHandover(ctx context.Context, id naming.ID, from, via string) {
	if from == "" || from == d.processor {
		return
	}
	d.m.kindCount(ctx, d.m.handovers, id.Kind().String())
	d.log.InfoContext(ctx, "taking over a pending record from another processor",
		"id", id.String(), "from_processor", from, "to_processor", d.processor, "via", via)
}

// recordedTaskName is the task name the blind writes err reports were
// recorded under (they share the ID's queue), or "" when none says.
func recordedTaskName(err error) string {
	var cw *outbox.ConcurrentWritesError
	if errors.As(err, &cw) {
		for _, r := range cw.Records {
			if r.TaskName != "" {
				return r.TaskName
			}
		}
	}
	return ""
}
