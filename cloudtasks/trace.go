package cloudtasks

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks/internal/tracing"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// rpcService is the gRPC service of Cloud Tasks, the prefix of an attempt
// span's rpc.method.
const rpcService = "google.cloud.tasks.v2.CloudTasks/"

// The messaging operation names of the dispatcher's spans (ADR 0014).
const (
	opNameDispatch = "dispatch"
	opNameTimer    = "schedule_timer"
	opNameCancel   = "cancel"
	opNameRecover  = "recover"
	opNameBatch    = "send"
)

// queueID returns the last part of a queue's resource name.
func queueID(queuePath string) string {
	return queuePath[strings.LastIndexByte(queuePath, '/')+1:]
}

// startSend starts the producer span of a Dispatch or ScheduleTimer of id
// to the queue at queuePath, or returns ctx and nil when no span would
// record. Its context is the one injected into the task.
func (d *Dispatcher) startSend(ctx context.Context, id naming.ID, queuePath string) (context.Context, trace.Span) {
	tr := d.tracer.Get()
	if tr == nil {
		return ctx, nil
	}
	op := opNameDispatch
	if id.IsTimer() {
		op = opNameTimer
	}
	return tr.Start(ctx, op+" "+queueID(queuePath), trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		semconv.MessagingSystemKey.String(tracing.System),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName(op),
		semconv.MessagingDestinationName(queuePath),
		semconv.MessagingMessageID(id.CloudTaskID()),
		tracing.KeyID.String(id.String()),
	))
}

// endSend ends the span of a Dispatch or ScheduleTimer with what it
// answered.
func endSend(span trace.Span, res *DispatchResult, err error) {
	if span == nil {
		return
	}
	if err != nil {
		endFailed(span, failureOutcome(err), err)
		return
	}
	span.SetAttributes(tracing.KeyOutcome.String(string(res.Outcome)), tracing.KeySkipped.Bool(res.Skipped), tracing.KeyCalls.Int(res.Calls))
	span.End()
}

// endFailed ends span as failed with err, outcome naming the failure.
func endFailed(span trace.Span, outcome string, err error) {
	span.SetAttributes(tracing.KeyOutcome.String(outcome), semconv.ErrorTypeKey.String(outcome))
	span.SetStatus(otelcodes.Error, err.Error())
	span.End()
}

// injectTrace writes the trace context of ctx into the headers of req, the
// request built from t, and checks that the headers are still within
// MaxHeaderBytes. The headers stay outside the payload fingerprint: the
// same ID dispatched under another trace is a repeat, not a conflict.
func (d *Dispatcher) injectTrace(ctx context.Context, t *Task, req *cloudtaskspb.CreateTaskRequest) error {
	added := d.prop.Inject(ctx, req.GetTask().GetHttpRequest().GetHeaders(), t.Headers)
	if added == 0 {
		return nil
	}
	if n := headerBytes(t.Headers) + added; n > MaxHeaderBytes {
		return &RequestError{Field: "Headers", Value: fmt.Sprintf("%d bytes", n),
			Rule: fmt.Sprintf("exceed %d bytes with the %d bytes of trace context headers the propagator adds", MaxHeaderBytes, added)}
	}
	return nil
}

// headerBytes counts headers as validate does: name, value and 4 bytes
// of separators each.
func headerBytes(h map[string]string) int {
	n := 0
	for k, v := range h {
		n += len(k) + len(v) + 4
	}
	return n
}

// linkLeader marks the span of ctx as that of a call that joined the flight
// f led by another call, and links it to the leader's span.
func linkLeader(ctx context.Context, f *flight) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.KeyJoined.Bool(true))
	if f.span.IsValid() {
		span.AddLink(trace.Link{SpanContext: f.span})
	}
}

// linkStored links the span of ctx to the span a record was written
// under, when that is another span: the call answered from, or finishing,
// the intent an earlier call recorded.
func linkStored(ctx context.Context, rec *outbox.Record) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if sc := tracing.Stored(rec.TraceID, rec.SpanID); sc.IsValid() && sc.SpanID() != span.SpanContext().SpanID() {
		span.AddLink(trace.Link{SpanContext: sc})
	}
}

// traceIDs fills rec's trace columns from the span of ctx.
func traceIDs(ctx context.Context, rec *outbox.Record) {
	rec.TraceID, rec.SpanID = tracing.IDs(trace.SpanContextFromContext(ctx))
}

// attempt makes one call of method (CreateTask, GetTask, DeleteTask) under
// a client span, a child of the operation's, that records the attempt's
// number, its backoff and the gRPC code. A code in fine (the method's
// expected refusal, such as CreateTask's ALREADY_EXISTS) is not an error.
func (d *Dispatcher) attempt(ctx context.Context, method string, t try, fine codes.Code, call func(context.Context) error) error {
	tr := d.tracer.Get()
	if tr == nil {
		return call(ctx)
	}
	ctx, span := tr.Start(ctx, rpcService+method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		semconv.RPCSystemNameGRPC,
		semconv.RPCMethod(rpcService+method),
		tracing.KeyAttempt.Int(t.n),
		tracing.KeyBackoff.Float64(t.backoff.Seconds()),
	))
	err := call(ctx)
	code := codeOf(err)
	span.SetAttributes(semconv.RPCResponseStatusCode(code.String()))
	if err != nil && code != fine {
		span.SetAttributes(semconv.ErrorTypeKey.String(code.String()))
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
	return err
}

// startBatch starts the span of one BatchCreateTasks request for items, a
// new trace linked to the span of every call it carries: the request is
// no one caller's.
func (d *Dispatcher) startBatch(parent string, items []*batchItem) (context.Context, trace.Span) {
	ctx := items[0].ctx
	tr := d.tracer.Get()
	if tr == nil {
		return ctx, nil
	}
	links := make([]trace.Link, 0, len(items))
	for _, it := range items {
		if sc := trace.SpanContextFromContext(it.ctx); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return tr.Start(ctx, opNameBatch+" "+queueID(parent), trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(links...), trace.WithAttributes(
			semconv.MessagingSystemKey.String(tracing.System),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName(opNameBatch),
			semconv.MessagingDestinationName(parent),
			semconv.MessagingBatchMessageCount(len(items)),
			semconv.RPCSystemNameGRPC,
			semconv.RPCMethod(rpcService+"BatchCreateTasks"),
		))
}

// endBatch ends the span of a BatchCreateTasks request that answered err
// and failed failed of its items.
func endBatch(span trace.Span, err error, failed int) {
	if span == nil {
		return
	}
	code := codeOf(err)
	span.SetAttributes(semconv.RPCResponseStatusCode(code.String()), attribute.Int("ctdispatch.batch.failed", failed))
	if err != nil {
		span.SetAttributes(semconv.ErrorTypeKey.String(code.String()))
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
}

// startCancel starts the span of a Cancel of id.
func (d *Dispatcher) startCancel(ctx context.Context, id naming.ID) (context.Context, trace.Span) {
	tr := d.tracer.Get()
	if tr == nil {
		return ctx, nil
	}
	return tr.Start(ctx, opNameCancel, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		semconv.MessagingSystemKey.String(tracing.System),
		semconv.MessagingOperationName(opNameCancel),
		semconv.MessagingMessageID(id.CloudTaskID()),
		tracing.KeyID.String(id.String()),
	))
}

// endCancel ends the span of a Cancel.
func endCancel(span trace.Span, res *CancelResult, err error) {
	if span == nil {
		return
	}
	if res.TaskName != "" {
		span.SetAttributes(semconv.MessagingDestinationName(res.TaskName[:strings.Index(res.TaskName, "/tasks/")]))
	}
	if err != nil {
		outcome := "cancel_failed"
		var we *WaitError
		if errors.As(err, &we) {
			outcome = "gave_up"
		}
		endFailed(span, outcome, err)
		return
	}
	span.SetAttributes(tracing.KeyOutcome.String(string(res.Outcome)))
	span.End()
}

// startRecover starts the span of a Recover pass.
func (d *Dispatcher) startRecover(ctx context.Context) (context.Context, trace.Span) {
	tr := d.tracer.Get()
	if tr == nil {
		return ctx, nil
	}
	return tr.Start(ctx, opNameRecover, trace.WithAttributes(
		semconv.MessagingSystemKey.String(tracing.System),
		semconv.MessagingOperationName(opNameRecover),
	))
}

// endRecover ends the span of a Recover pass with its counts.
func endRecover(span trace.Span, st *RecoverStats, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(
		attribute.Int("ctdispatch.recover.stale", st.Stale),
		attribute.Int("ctdispatch.recover.found", st.Found),
		attribute.Int("ctdispatch.recover.not_found", st.NotFound),
		attribute.Int("ctdispatch.recover.errors", st.Errors),
	)
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
}

// startResolve starts the span of one pending record's resolution in a
// Recover pass: a child of the pass, linked to the span the intent was
// recorded under, whose context the record keeps for the work done later
// in its name.
func (d *Dispatcher) startResolve(ctx context.Context, rec *outbox.Record) (context.Context, trace.Span) {
	tr := d.tracer.Get()
	if tr == nil {
		return ctx, nil
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(
		semconv.MessagingSystemKey.String(tracing.System),
		semconv.MessagingOperationName(opNameRecover),
		semconv.MessagingDestinationName(rec.Queue),
		semconv.MessagingMessageID(rec.CloudTaskID),
		tracing.KeyID.String(rec.ID),
	)}
	if sc := tracing.Stored(rec.TraceID, rec.SpanID); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	return tr.Start(ctx, opNameRecover+" "+queueID(rec.Queue), opts...)
}

// endResolve ends the span of one record's resolution.
func endResolve(span trace.Span, f *flight, err error) {
	if span == nil {
		return
	}
	if err != nil {
		endFailed(span, "error", err)
		return
	}
	span.SetAttributes(tracing.KeyOutcome.String(string(f.verdict)))
	span.End()
}
