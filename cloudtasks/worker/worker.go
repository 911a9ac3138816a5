package worker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/ctdispatch/ctdispatch/cloudtasks/internal/tracing"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Handler does the work of one delivery. It returns nil when the work is
// done, Permanent(err) when it can never succeed, SlowDown(err, d) when the
// queue should send less, and any other error to have the task retried.
// With an SQLInbox its writes go through d.Tx() so they commit with the
// key's done mark; anything else it does outside that transaction (a call
// to another service, a message sent) may happen again on a redelivery
// and must be idempotent on d.ID.
type Handler func(ctx context.Context, d *Delivery) error

// Outcome is what became of one request, as logged and counted.
type Outcome string

// The outcomes, with the status each is answered with (see the package
// documentation for why).
const (
	// OutcomeDone: the handler succeeded and the key is marked done. 200.
	OutcomeDone Outcome = "done"
	// OutcomeDuplicate: the key was already finished; the handler was not
	// called. 200.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeFailed: the handler returned a permanent error; its writes
	// were undone and the key is marked failed. 200.
	OutcomeFailed Outcome = "failed"
	// OutcomeRejected: a verified request whose headers are missing,
	// malformed or do not fit together; the handler was not called. 200.
	OutcomeRejected Outcome = "rejected"
	// OutcomeRetry: the handler returned a retryable error, or the inbox
	// failed. 500.
	OutcomeRetry Outcome = "retry"
	// OutcomePanic: the handler panicked; its writes were undone. 500.
	OutcomePanic Outcome = "panic"
	// OutcomeBusy: another delivery of the key held it longer than
	// Config.LockTimeout. 500.
	OutcomeBusy Outcome = "busy"
	// OutcomeSlowDown: the handler asked the queue to slow down. 503 with
	// Retry-After.
	OutcomeSlowDown Outcome = "slow_down"
	// OutcomeUnauthorized: no token, or one that is forged, expired or
	// malformed. 401.
	OutcomeUnauthorized Outcome = "unauthorized"
	// OutcomeForbidden: a valid token from the wrong issuer, audience or
	// service account. 403.
	OutcomeForbidden Outcome = "forbidden"
	// OutcomeTooLarge: a body over Config.MaxBodyBytes. 413.
	OutcomeTooLarge Outcome = "too_large"
	// OutcomeKeysUnavailable: the token's signing keys could not be
	// fetched. 500.
	OutcomeKeysUnavailable Outcome = "keys_unavailable"
)

// Status is the HTTP status the worker answers with for the outcome.
func (o Outcome) Status() int {
	switch o {
	case OutcomeDone, OutcomeDuplicate, OutcomeFailed, OutcomeRejected:
		return http.StatusOK
	case OutcomeSlowDown:
		return http.StatusServiceUnavailable
	case OutcomeUnauthorized:
		return http.StatusUnauthorized
	case OutcomeForbidden:
		return http.StatusForbidden
	case OutcomeTooLarge:
		return http.StatusRequestEntityTooLarge
	default:
		return http.StatusInternalServerError
	}
}

// Worker is an http.Handler that receives Cloud Tasks deliveries of tasks
// dispatched by ctdispatch: it verifies each request, parses its headers
// into a Delivery, runs the handler through the inbox, and answers with
// the status that tells Cloud Tasks what to do next.
type Worker struct {
	cfg     Config
	handler Handler
	verify  *verifier
	locks   keyLocks
	metrics *metrics
	log     *slog.Logger
	tracer  *tracing.Tracer
	prop    tracing.Propagator
}

// New returns a Worker that runs h for each accepted delivery. It fails
// with a *ConfigError when the configuration is incomplete or
// contradictory.
func New(ctx context.Context, cfg *Config, h Handler) (*Worker, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if h == nil {
		return nil, &ConfigError{Field: "handler", Value: "nil", Rule: "is required"}
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(c.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("worker: metrics: %w", err)
	}
	w := &Worker{cfg: c, handler: h, metrics: m, log: slog.New(tracing.LogHandler(c.Logger.Handler())),
		tracer: tracing.NewTracer(c.TracerProvider), prop: tracing.NewPropagator(c.Propagator)}
	if c.InsecureSkipVerify {
		w.log.Warn("worker: token verification is off (Config.InsecureSkipVerify): any caller that reaches this handler can run tasks")
	} else if w.verify, err = newVerifier(ctx, &c); err != nil {
		return nil, err
	}
	if c.ExplainRefusals {
		w.log.Warn("worker: refusals are explained to the caller (Config.ExplainRefusals): an answer names the accepted issuers, audiences and service accounts; for development only")
	}
	return w, nil
}

// ServeHTTP handles one delivery. See the package documentation for the
// status it answers with.
func (w *Worker) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	start := w.cfg.Clock.Now()
	r, span := w.startProcess(r)
	res := w.serve(rw, r, start)
	// The record's latency ends at the outcome; the metric's, below, at
	// the answer, after the record's own write.
	w.recordEnd(r.Context(), res.record, res.outcome, w.cfg.Clock.Since(start))
	status := res.outcome.Status()
	if res.outcome == OutcomeUnauthorized {
		rw.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	}
	if res.retryAfter > 0 {
		rw.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(res.retryAfter.Seconds())), 10))
	}
	body := string(res.outcome) + "\n"
	if ae := refusalOf(res.err); ae != nil {
		// The caller learns the reason's code, not the values behind it:
		// those would tell it whose token to obtain. The log has them.
		rw.Header().Set(HeaderRefusal, string(ae.Reason))
		if w.cfg.ExplainRefusals {
			body += string(ae.Reason) + ": " + ae.Message + "\n"
		}
	}
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.WriteHeader(status)
	_, _ = io.WriteString(rw, body)
	w.finish(r.Context(), res, status, w.cfg.Clock.Since(start))
	endProcess(span, &res)
}

// result is what serve decided about one request.
type result struct {
	outcome    Outcome
	delivery   Delivery
	err        error
	retryAfter time.Duration
	// record is the delivery's started record in Config.Outbox, nil when
	// it has none.
	record *outbox.Record
}

func (w *Worker) serve(rw http.ResponseWriter, r *http.Request, arrived time.Time) result {
	ctx := r.Context()
	var account string
	if w.verify != nil {
		var err error
		if account, err = w.verify.verify(ctx, r.Header.Get("Authorization")); err != nil {
			var ae *authError
			errors.As(err, &ae)
			switch ae.Status {
			case http.StatusUnauthorized:
				return result{outcome: OutcomeUnauthorized, err: err}
			case http.StatusForbidden:
				return result{outcome: OutcomeForbidden, err: err}
			default:
				return result{outcome: OutcomeKeysUnavailable, err: err}
			}
		}
	}
	d, err := parseDelivery(r.Header, w.cfg.AcceptUnkeyed)
	d.ServiceAccount = account
	if err != nil {
		return result{outcome: OutcomeRejected, delivery: d, err: err}
	}
	if d.Body, err = io.ReadAll(http.MaxBytesReader(rw, r.Body, w.cfg.MaxBodyBytes)); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return result{outcome: OutcomeTooLarge, delivery: d, err: fmt.Errorf("body over Config.MaxBodyBytes (%d bytes)", w.cfg.MaxBodyBytes)}
		}
		return result{outcome: OutcomeRetry, delivery: d, err: fmt.Errorf("reading the body: %w", err)}
	}
	if d.ID.IsZero() { // an unkeyed task, let through by AcceptUnkeyed
		err := w.call(ctx, &d)
		return w.classify(d, OutcomeDone, err)
	}
	rec := w.recordStart(ctx, &d, arrived)
	res := w.process(ctx, &d)
	res.record = rec
	return res
}

// process runs a keyed delivery through the inbox.
func (w *Worker) process(ctx context.Context, d *Delivery) result {
	key := d.ID.String()
	// Deliveries of one key wait here, not each on a database connection.
	// The two waits share one LockTimeout, so a delivery never waits longer
	// in all than the deadline the timeout is chosen to stay under.
	start := time.Now()
	unlock, err := w.locks.lock(ctx, key, w.cfg.LockTimeout)
	if err != nil {
		return w.classify(*d, "", err)
	}
	defer unlock()
	left := w.cfg.LockTimeout - time.Since(start)
	if left <= 0 {
		return w.classify(*d, "", fmt.Errorf("%w: key %s held in this process for %s", ErrBusy, key, w.cfg.LockTimeout))
	}
	outcome, err := w.cfg.Inbox.Process(ctx, key, left, func(ctx context.Context, tx *sql.Tx) error {
		d.tx = tx
		defer func() { d.tx = nil }()
		return w.call(ctx, d)
	})
	return w.classify(*d, outcome, err)
}

// call runs the handler, turning a panic into an error so the inbox rolls
// the transaction back.
func (w *Worker) call(ctx context.Context, d *Delivery) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	return w.handler(ctx, d)
}

// classify maps what the inbox (or the handler) returned to an outcome.
func (w *Worker) classify(d Delivery, outcome Outcome, err error) result {
	var slow *SlowDownError
	var pe *panicError
	switch {
	case err == nil:
		return result{outcome: outcome, delivery: d}
	case IsPermanent(err): // only unkeyed: an inbox records it as OutcomeFailed
		return result{outcome: OutcomeFailed, delivery: d, err: err}
	case errors.As(err, &slow):
		return result{outcome: OutcomeSlowDown, delivery: d, err: err, retryAfter: max(slow.RetryAfter, time.Second)}
	case errors.As(err, &pe):
		return result{outcome: OutcomePanic, delivery: d, err: err}
	case errors.Is(err, ErrBusy):
		return result{outcome: OutcomeBusy, delivery: d, err: err}
	default:
		return result{outcome: OutcomeRetry, delivery: d, err: err}
	}
}

// finish logs and counts a request once it is answered.
func (w *Worker) finish(ctx context.Context, res result, status int, took time.Duration) {
	ae := refusalOf(res.err)
	var refusal Refusal
	if ae != nil {
		refusal = ae.Reason
	}
	w.metrics.record(ctx, res.outcome, refusal, took)
	d := res.delivery
	attrs := []slog.Attr{
		slog.String("outcome", string(res.outcome)), slog.Int("status", status),
		slog.String("task", d.TaskName), slog.String("queue", d.Queue),
		slog.String("id", d.ID.String()), slog.Int("retry_count", d.RetryCount),
		slog.Duration("took", took),
	}
	level := slog.LevelDebug
	switch res.outcome {
	case OutcomeRetry, OutcomeBusy, OutcomeSlowDown, OutcomeUnauthorized, OutcomeForbidden:
		level = slog.LevelWarn
	case OutcomeFailed, OutcomeRejected, OutcomePanic, OutcomeTooLarge, OutcomeKeysUnavailable:
		level = slog.LevelError
	}
	if res.outcome == OutcomeRejected {
		// Both sides of the mismatch, as the request carried them.
		attrs = append(attrs, slog.String("idempotency_key", d.Header.Get(HeaderIdempotencyKey)),
			slog.String("ctdispatch_task_id", d.Header.Get(HeaderCtdispatchTaskID)))
	}
	if ae != nil {
		attrs = append(attrs, slog.String("refusal", string(ae.Reason)))
	}
	if res.err != nil {
		attrs = append(attrs, slog.String("error", res.err.Error()))
	}
	var pe *panicError
	if errors.As(res.err, &pe) {
		attrs = append(attrs, slog.String("stack", string(pe.stack)))
	}
	w.log.LogAttrs(ctx, level, "worker: delivery", attrs...)
}
