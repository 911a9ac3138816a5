package worker

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ctdispatch/ctdispatch/cloudtasks/internal/tracing"
)

// opProcess is the messaging operation name of a delivery's span.
const opProcess = "process"

// startProcess starts the consumer span of a delivery and returns r with
// the span in its context, so that the inbox transaction and the handler
// run in it, or r and nil when no span would record.
//
// The span is linked to the producer span whose context the task's
// headers carry. Its parent is the span the request's context already
// holds (a server span, when the worker is wrapped in one); when it holds
// none, the producer's context is the parent too, so that Dispatch, the
// delivery and the effect are one trace: OpenTelemetry's messaging
// conventions allow it when one message is processed, which each Cloud
// Tasks delivery is (ADR 0014). Config.TraceLinkOnly keeps the link only.
func (w *Worker) startProcess(r *http.Request) (*http.Request, trace.Span) {
	tr := w.tracer.Get()
	if tr == nil {
		return r, nil
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		semconv.MessagingSystemKey.String(tracing.System),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName(opProcess),
	)}
	parent := r.Context()
	if producer := w.producer(r.Header); producer.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: producer}))
		if !w.cfg.TraceLinkOnly && !trace.SpanContextFromContext(parent).IsValid() {
			parent = trace.ContextWithRemoteSpanContext(parent, producer)
		}
	}
	ctx, span := tr.Start(parent, opProcess, opts...)
	return r.WithContext(ctx), span
}

// producer returns the span context the request's headers carry, as the
// configured propagator reads them.
func (w *Worker) producer(h http.Header) trace.SpanContext {
	prop := w.prop.Get()
	if prop == nil {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.HeaderCarrier(h)))
}

// endProcess ends the span of a delivery with what became of it.
func endProcess(span trace.Span, res *result) {
	if span == nil {
		return
	}
	d := &res.delivery
	attrs := []attribute.KeyValue{
		tracing.KeyOutcome.String(string(res.outcome)),
		tracing.KeyRetryCount.Int(d.RetryCount),
		tracing.KeyExecutionCount.Int(d.ExecutionCount),
	}
	if d.Queue != "" {
		span.SetName(opProcess + " " + d.Queue)
		attrs = append(attrs, semconv.MessagingDestinationName(d.Queue))
	}
	if d.TaskName != "" {
		attrs = append(attrs, semconv.MessagingMessageID(d.TaskName))
	}
	if !d.ID.IsZero() {
		attrs = append(attrs, tracing.KeyID.String(d.ID.String()))
	}
	span.SetAttributes(attrs...)
	switch res.outcome {
	case OutcomeDone, OutcomeDuplicate, OutcomeSlowDown:
	default:
		span.SetAttributes(semconv.ErrorTypeKey.String(string(res.outcome)))
		msg := string(res.outcome)
		if res.err != nil {
			msg = res.err.Error()
		}
		span.SetStatus(otelcodes.Error, msg)
	}
	span.End()
}
