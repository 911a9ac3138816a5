package cloudtasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"github.com/jonboulle/clockwork"
	"golang.org/x/sync/singleflight"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Outcome says how a dispatch or timer ended. Every outcome is a success:
// the task exists exactly once.
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
	// Skipped is true when the outbox answered without a Cloud Tasks call.
	Skipped bool
	// Calls counts the CreateTask calls this call made (0 when skipped or
	// shared with a concurrent identical call).
	Calls int
}

// taskClient is the part of the official client the dispatcher uses.
type taskClient interface {
	CreateTask(ctx context.Context, req *cloudtaskspb.CreateTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error)
	GetTask(ctx context.Context, req *cloudtaskspb.GetTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error)
	DeleteTask(ctx context.Context, req *cloudtaskspb.DeleteTaskRequest, opts ...gax.CallOption) error
}

// Dispatcher hands tasks to Cloud Tasks exactly once per internal ID and
// records each in the outbox. Its methods are safe for concurrent use.
type Dispatcher struct {
	cfg       Config
	client    taskClient
	closeFns  []func() error
	box       Outbox
	processor string
	log       *slog.Logger
	clock     clockwork.Clock
	m         *metrics
	flights   singleflight.Group
	closed    atomic.Bool
}

// NewDispatcher checks cfg, opens the client and the outbox it names, and
// returns a ready Dispatcher. Errors about cfg match ErrInvalidConfig.
func NewDispatcher(ctx context.Context, cfg *Config) (*Dispatcher, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	d := &Dispatcher{cfg: c, log: c.Logger, clock: c.Clock}
	m, err := newMetrics(c.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("cloudtasks: metrics: %w", err)
	}
	d.m = m
	switch {
	case c.Client != nil:
		d.client = c.Client
	default:
		opts := c.ClientOptions
		if c.EmulatorAddr != "" {
			opts = []option.ClientOption{
				option.WithEndpoint(c.EmulatorAddr),
				option.WithoutAuthentication(),
				option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			}
		}
		cl, err := ctapi.NewClient(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("cloudtasks: open client: %w", err)
		}
		d.client = cl
		d.closeFns = append(d.closeFns, cl.Close)
	}
	switch {
	case c.Outbox != nil:
		d.box = c.Outbox
	case c.OutboxDir != "":
		ob, err := outbox.Open(ctx, outbox.Options{Root: c.OutboxDir, LogDir: c.OutboxLogDir, ProcessorUUID: c.ProcessorUUID, Logger: c.Logger, Clock: c.Clock})
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("cloudtasks: open outbox: %w", err)
		}
		d.box = ob
		// The outbox closes first, so its last records reach Parquet before
		// anything else is torn down.
		d.closeFns = append([]func() error{ob.Close}, d.closeFns...)
	default:
		d.box = newMemOutbox(c.ProcessorUUID.String(), c.Clock)
	}
	d.processor = d.box.ProcessorUUID()
	return d, nil
}

// newWithClient builds a Dispatcher over a given client and outbox (nil:
// in memory), for tests that inject failures.
func newWithClient(cfg Config, client taskClient, box Outbox) (*Dispatcher, error) {
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(c.MeterProvider)
	if err != nil {
		return nil, err
	}
	if box == nil {
		box = newMemOutbox(c.ProcessorUUID.String(), c.Clock)
	}
	return &Dispatcher{cfg: c, client: client, box: box, processor: box.ProcessorUUID(), log: c.Logger, clock: c.Clock, m: m}, nil
}

// Now returns the current time on the dispatcher's clock, against which
// schedule times are checked.
func (d *Dispatcher) Now() time.Time { return d.clock.Now() }

// ProcessorUUID returns the UUID this dispatcher writes into its records.
func (d *Dispatcher) ProcessorUUID() string { return d.processor }

// Close flushes the outbox (a given one that has a Flush method, such as
// *outbox.Outbox, rolls its log into Parquet), and closes the outbox and the
// client if the dispatcher opened them. Calls after Close fail with
// ErrClosed.
func (d *Dispatcher) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	var errs []error
	if f, ok := d.cfg.Outbox.(interface{ Flush(context.Context) error }); ok {
		errs = append(errs, f.Flush(context.Background()))
	}
	for _, fn := range d.closeFns {
		errs = append(errs, fn())
	}
	return errors.Join(errs...)
}

// QueuePath returns the full resource name of a queue ID; an empty ID
// means the default queue.
func (d *Dispatcher) QueuePath(queue string) string {
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
// *OwnershipError (ErrNotOwner); *CallError matching ErrCreateFailed for a
// permanent gRPC code (recorded as failed; the ID may be dispatched again)
// or ErrGaveUp when transient errors outlasted the policy or ctx (the
// record stays pending; call again or let Recover finish it).
func (d *Dispatcher) Dispatch(ctx context.Context, req DispatchRequest) (DispatchResult, error) {
	id, err := req.ID()
	if err != nil {
		return DispatchResult{}, err
	}
	return d.Submit(ctx, id, req.Task)
}

// flight is the shared answer of one round of identical concurrent calls.
type flight struct {
	fp       string // the leader's payload fingerprint
	recorded string // the outbox's fingerprint, when it conflicted with fp
	res      DispatchResult
}

// Submit creates the task named by id (a dispatch or timer ID) with the
// semantics of Dispatch. A timer's record goes to the timers table. It is
// the common core of Dispatch and the timers package.
func (d *Dispatcher) Submit(ctx context.Context, id naming.ID, t Task) (DispatchResult, error) {
	start := d.clock.Now()
	kind := id.Kind().String()
	if d.closed.Load() {
		return DispatchResult{}, ErrClosed
	}
	if id.IsZero() {
		return DispatchResult{}, &RequestError{Field: "ID", Rule: "is the zero ID"}
	}
	if err := t.validate(start); err != nil {
		return DispatchResult{}, err
	}
	fp := naming.PayloadFingerprint(t.Body)
	ran := false
	v, err, _ := d.flights.Do(id.String(), func() (any, error) {
		ran = true
		return d.submit(ctx, id, &t, fp, start)
	})
	f := v.(*flight)
	res := f.res
	if !ran {
		// A concurrent call of the same ID did the work; this one is its
		// duplicate.
		if f.recorded != "" && f.recorded == fp {
			// The leader's payload conflicted with the record, and this
			// call's matches it: it is not a conflict, so ask again.
			return d.Submit(ctx, id, t)
		}
		if f.fp != fp {
			d.m.conflicts.Add(ctx, 1)
			d.log.Warn("payload conflict with a concurrent call", "id", id.String())
			return DispatchResult{}, &ConflictError{ID: id.String(), Recorded: f.fp, Given: fp}
		}
		if err != nil {
			return DispatchResult{}, err
		}
		if res.Outcome == OutcomeCreated || res.Outcome == OutcomeRecovered {
			res.Outcome = OutcomeAlreadyExisted
		}
		res.Calls = 0
	}
	if err != nil {
		d.m.outcome(ctx, kind, failureOutcome(err), d.clock.Since(start))
		return DispatchResult{}, err
	}
	d.m.outcome(ctx, kind, string(res.Outcome), d.clock.Since(start))
	return res, nil
}

func failureOutcome(err error) string {
	switch {
	case errors.Is(err, ErrCreateFailed):
		return "failed"
	case errors.Is(err, ErrGaveUp):
		return "gave_up"
	case errors.Is(err, ErrPayloadConflict):
		return "conflict"
	}
	return "error"
}

func tableOf(id naming.ID) outbox.Table {
	if id.IsTimer() {
		return outbox.TableTimers
	}
	return outbox.TableDispatch
}

// submit is the work of one flight: consult the outbox, record pending,
// create the task, record the outcome.
func (d *Dispatcher) submit(ctx context.Context, id naming.ID, t *Task, fp string, now time.Time) (*flight, error) {
	f := &flight{fp: fp}
	key, cloudID := id.String(), id.CloudTaskID()
	table := tableOf(id)
	queuePath := d.QueuePath(t.Queue)
	f.res = DispatchResult{ID: key, CloudTaskID: cloudID, TaskName: queuePath + "/tasks/" + cloudID}

	prev, found, err := d.box.Latest(ctx, table, key)
	if err != nil {
		return f, fmt.Errorf("cloudtasks: %s: read outbox: %w", key, err)
	}
	recovering := false
	if found {
		switch prev.Status {
		case outbox.StatusCreated, outbox.StatusAlreadyExisted, outbox.StatusPending:
			if prev.PayloadSHA256 != "" && prev.PayloadSHA256 != fp {
				f.recorded = prev.PayloadSHA256
				d.m.conflicts.Add(ctx, 1)
				d.log.Warn("payload conflict with the recorded dispatch", "id", key, "status", prev.Status)
				return f, &ConflictError{ID: key, Recorded: prev.PayloadSHA256, Given: fp}
			}
		}
		switch prev.Status {
		case outbox.StatusCreated, outbox.StatusAlreadyExisted:
			d.m.kindCount(ctx, d.m.skips, id.Kind().String())
			d.log.Debug("idempotent skip: already dispatched", "id", key, "status", prev.Status)
			f.res.Outcome = OutcomeAlreadyExisted
			f.res.FirstRecorded = prev.CreatedAt
			f.res.Skipped = true
			return f, nil
		case outbox.StatusPending:
			if prev.ProcessorUUID != d.processor && d.cfg.EnforceOwnership {
				return f, &OwnershipError{ID: key, Owner: prev.ProcessorUUID}
			}
			recovering = now.Sub(prev.UpdatedAt) >= d.cfg.StaleAfter
		}
	}

	rec := outbox.Record{
		Table: table, ID: key, CloudTaskID: cloudID, Queue: queuePath,
		RunID: id.RunID(), TaskKey: id.TaskKey(), Attempt: id.Attempt(), Kind: id.Kind().String(),
		Status: outbox.StatusPending, PayloadSHA256: fp, CreatedAt: micro(now),
	}
	if id.IsTimer() {
		rec.DueAt = id.Time()
	}
	if found {
		rec.CreatedAt = prev.CreatedAt
		rec.CreateCalls = prev.CreateCalls
	}
	// The pending marker is not waited for: if it is lost in a crash, the
	// caller got no answer and repeats the call under the same name, which
	// Cloud Tasks deduplicates. The outcome below is durable.
	appendPending := d.box.AppendAsync
	if d.cfg.DurablePending {
		appendPending = d.box.Append
	}
	if err := appendPending(ctx, rec); err != nil {
		return f, fmt.Errorf("cloudtasks: %s: record pending: %w", key, err)
	}
	req := t.createRequest(queuePath, key, cloudID, now)
	calls, err := d.cfg.Retry.retry(ctx, d.clock, rand.Float64, d.onRetry("CreateTask"), func(ctx context.Context) error {
		_, err := d.client.CreateTask(ctx, req)
		code := codeOf(err)
		d.m.call(ctx, "CreateTask", code)
		if err != nil && code != codes.AlreadyExists {
			d.log.Debug("CreateTask error", "id", key, "code", code.String())
		}
		return err
	})
	f.res.Calls = calls
	code := codeOf(err)
	rec.CreateCalls += int32(calls)
	switch {
	case err == nil:
		rec.Status, f.res.Outcome = outbox.StatusCreated, OutcomeCreated
	case code == codes.AlreadyExists:
		rec.Status, f.res.Outcome = outbox.StatusAlreadyExisted, OutcomeAlreadyExisted
	case Transient(code) || ctx.Err() != nil:
		// The outcome is unknown (the task may exist): the record stays
		// pending, now durably and with the calls made, for Recover or the
		// caller's repeat.
		d.log.Info("gave up; outcome unknown, record left pending", "id", key, "code", code.String(), "calls", calls)
		cerr := &CallError{ID: key, Method: "CreateTask", Code: code, Calls: calls, Transient: true, Err: err}
		rec.ErrorCode = code.String()
		if aerr := d.box.Append(context.WithoutCancel(ctx), rec); aerr != nil {
			return f, errors.Join(cerr, fmt.Errorf("cloudtasks: %s: record pending: %w", key, aerr))
		}
		return f, cerr
	default:
		rec.Status, rec.ErrorCode = outbox.StatusFailed, code.String()
		d.log.Info("CreateTask failed", "id", key, "code", code.String(), "calls", calls)
		cerr := &CallError{ID: key, Method: "CreateTask", Code: code, Calls: calls, Err: err}
		if aerr := d.box.Append(context.WithoutCancel(ctx), rec); aerr != nil {
			return f, errors.Join(cerr, fmt.Errorf("cloudtasks: %s: record failure: %w", key, aerr))
		}
		return f, cerr
	}
	if recovering {
		f.res.Outcome = OutcomeRecovered
		d.m.recovered.Add(ctx, 1, metricAttrs(id.Kind().String(), "dispatch"))
		d.noteHandover(ctx, id, prev.ProcessorUUID, "dispatch")
	}
	f.res.FirstRecorded = rec.CreatedAt
	// The outcome is recorded even if the caller's context ended meanwhile:
	// the task exists, and the record must say so.
	if err := d.box.Append(context.WithoutCancel(ctx), rec); err != nil {
		return f, fmt.Errorf("cloudtasks: %s: task %s but recording it failed: %w", key, rec.Status, err)
	}
	d.log.Debug("dispatched", "id", key, "outcome", f.res.Outcome, "calls", calls)
	return f, nil
}

// noteHandover logs and counts a record finished by a processor other than
// the one that left it pending.
func (d *Dispatcher) noteHandover(ctx context.Context, id naming.ID, from, via string) {
	if from == "" || from == d.processor {
		return
	}
	d.m.kindCount(ctx, d.m.handovers, id.Kind().String())
	d.log.Info("taking over a pending record from another processor",
		"id", id.String(), "from_processor", from, "to_processor", d.processor, "via", via)
}

// micro truncates t to the microsecond UTC precision the outbox stores, so
// a returned FirstRecorded equals the one read back later.
func micro(t time.Time) time.Time { return time.UnixMicro(t.UnixMicro()).UTC() }
