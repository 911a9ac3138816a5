package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/ctdispatch/ctdispatch/cloudtasks/internal/tracing"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// The records a delivery gets in Config.Outbox, for MetricRecordFailures.
const (
	recordStarted = "started"
	recordOutcome = "outcome"
)

// recordedOutcomes are the outcomes a delivery record can carry: those of
// a delivery that passed verification, the key check and the body cap.
// Each is a status of the deliveries table of the same name.
var recordedOutcomes = map[Outcome]outbox.Status{
	OutcomeDone: outbox.StatusDone, OutcomeDuplicate: outbox.StatusDuplicate, OutcomeFailed: outbox.StatusFailed,
	OutcomeRetry: outbox.StatusRetry, OutcomePanic: outbox.StatusPanic, OutcomeBusy: outbox.StatusBusy,
	OutcomeSlowDown: outbox.StatusSlowDown,
}

// recordStart appends the started record of a keyed delivery that
// arrived at arrived and waits until it is kept, so that a delivery whose
// process dies inside the handler still shows as started. It returns the
// record, for recordEnd, or nil when nothing is recorded.
func (w *Worker) recordStart(ctx context.Context, d *Delivery, arrived time.Time) *outbox.Record {
	if w.cfg.Outbox == nil || d.ID.IsZero() {
		return nil
	}
	// A UUIDv7 per delivery: Cloud Tasks may deliver one attempt twice
	// with the same counts, and the suffix keeps the two apart.
	r := outbox.DeliveryRecordOf(d.ID, uuid.Must(uuid.NewV7()).String())
	r.Queue, r.Status, r.CreatedAt, r.UpdatedAt = d.Queue, outbox.StatusStarted, arrived, arrived
	r.Delivery = outbox.DeliveryFields{RetryCount: int32(d.RetryCount), ExecutionCount: int32(d.ExecutionCount)}
	r.TraceID, r.SpanID = tracing.IDs(trace.SpanContextFromContext(ctx))
	if err := outbox.AppendAndWait(ctx, w.cfg.Outbox, r); err != nil {
		w.recordFailed(ctx, &r, recordStarted, err)
	}
	return &r
}

// recordEnd appends the outcome of a delivery whose started record is
// r and waits until it is kept, so that a delivery answered has its
// outcome as durable as the outbox makes it. A failure is logged and
// counted; it never changes the answer.
func (w *Worker) recordEnd(ctx context.Context, r *outbox.Record, o Outcome, latency time.Duration) {
	st, ok := recordedOutcomes[o]
	if r == nil || !ok {
		return
	}
	// Microseconds, as stored, so that updated_at - created_at = latency_us.
	latency = latency.Truncate(time.Microsecond)
	r.Status, r.UpdatedAt = st, r.CreatedAt.Truncate(time.Microsecond).Add(latency)
	r.Delivery.HTTPStatus, r.Delivery.Latency = int32(o.Status()), latency
	// The request's context ends when the caller goes away; the record of
	// what the worker did is still worth keeping.
	if err := outbox.AppendAndWait(context.WithoutCancel(ctx), w.cfg.Outbox, *r); err != nil {
		w.recordFailed(ctx, r, recordOutcome, err)
	}
}

func (w *Worker) recordFailed(ctx context.Context, r *outbox.Record, which string, err error) {
	w.metrics.recordFailed(ctx, which)
	w.log.LogAttrs(ctx, slog.LevelError, "worker: delivery record not written; the answer stands",
		slog.String("record", which), slog.String("delivery_id", r.ID), slog.String("status", string(r.Status)),
		slog.String("error", err.Error()))
}
