package cloudtasks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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

// rpcName returns the full gRPC name of method, the name of its attempt
// spans and events: a constant for the methods the dispatcher retries, so
// that no call builds it.
func rpcName(method string) string {
	switch method {
	case "CreateTask":
		return rpcService + "CreateTask"
	case "GetTask":
		return rpcService + "GetTask"
	case "DeleteTask":
		return rpcService + "DeleteTask"
	}
	return rpcService + method
}

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

// sendStart is how the producer span of an operation (dispatch or
// schedule_timer) to one queue starts: its name, its kind and the
// attributes a sampler may decide on, which the conventions ask for at
// the start. The rest come at the end (endSend).
type sendStart struct {
	name string
	opts []trace.SpanStartOption
}

func newSendStart(op, queuePath string) *sendStart {
	return &sendStart{name: op + " " + queueID(queuePath), opts: []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String(tracing.System),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName(op),
			semconv.MessagingDestinationName(queuePath),
		),
	}}
}

// sendStarts holds the producer spans' starts for the default queue, made
// once: most calls go there, and a span's start options built per call
// cost the SDK more than the span.
type sendStarts struct {
	queuePath       string
	dispatch, timer *sendStart
}

func newSendStarts(queuePath string) sendStarts {
	return sendStarts{queuePath: queuePath, dispatch: newSendStart(opNameDispatch, queuePath), timer: newSendStart(opNameTimer, queuePath)}
}

// of returns the start of the span of id's operation to the queue at
// queuePath.
func (s *sendStarts) of(id naming.ID, queuePath string) *sendStart {
	switch {
	case queuePath != s.queuePath && id.IsTimer():
		return newSendStart(opNameTimer, queuePath)
	case queuePath != s.queuePath:
		return newSendStart(opNameDispatch, queuePath)
	case id.IsTimer():
		return s.timer
	}
	return s.dispatch
}

// startSend starts the producer span of a Dispatch or ScheduleTimer of id
// to the queue at queuePath, or returns ctx and nil when no span would
// record. Its context is the one injected into the task.
func (d *Dispatcher) startSend(ctx context.Context, id naming.ID, queuePath string) (context.Context, trace.Span) {
	tr := d.tracer.Get()
	if tr == nil {
		return ctx, nil
	}
	st := d.sendStarts.of(id, queuePath)
	return tr.Start(ctx, st.name, st.opts...)
}

// endSend ends the span of a Dispatch or ScheduleTimer of id with what it
// answered. ctdispatch.skipped is set only when true, so that a call that
// made its task ends with eight attributes: with more, the SDK allocates a
// map to deduplicate them when the span ends.
func endSend(span trace.Span, id naming.ID, res *DispatchResult, err error) {
	if span == nil {
		return
	}
	msg, key := semconv.MessagingMessageID(id.CloudTaskID()), tracing.KeyID.String(id.String())
	switch {
	case err != nil:
		outcome := failureOutcome(err)
		span.SetAttributes(msg, key, tracing.KeyOutcome.String(outcome), semconv.ErrorTypeKey.String(outcome))
		span.SetStatus(otelcodes.Error, err.Error())
	case res.Skipped:
		span.SetAttributes(msg, key, tracing.KeyOutcome.String(string(res.Outcome)), tracing.KeyCalls.Int(res.Calls), tracing.KeySkipped.Bool(true))
	default:
		span.SetAttributes(msg, key, tracing.KeyOutcome.String(string(res.Outcome)), tracing.KeyCalls.Int(res.Calls))
	}
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
	added, wrote := d.prop.Inject(ctx, req.GetTask().GetHttpRequest().GetHeaders(), t.Headers)
	if !wrote {
		d.warnNotPropagated(ctx)
	}
	if added == 0 {
		return nil
	}
	if n := headerBytes(t.Headers) + added; n > MaxHeaderBytes {
		return &RequestError{Field: "Headers", Value: fmt.Sprintf("%d bytes", n),
			Rule: fmt.Sprintf("exceed %d bytes with the %d bytes of trace context headers the propagator adds", MaxHeaderBytes, added)}
	}
	return nil
}

// warnNotPropagated logs, once in the dispatcher's life, that a call with a
// span to send left without its trace context: the propagator is
// OpenTelemetry's global no-op until a program sets one, and then no
// worker can link to or continue the call's trace. A call with no span
// (tracing off) has nothing to send and says nothing.
func (d *Dispatcher) warnNotPropagated(ctx context.Context) {
	if d.unpropagated.Load() || !trace.SpanContextFromContext(ctx).IsValid() || d.unpropagated.Swap(true) {
		return
	}
	d.log.WarnContext(ctx, "trace context not propagated: the propagator wrote no header for a call with a span, so its task "+
		"carries no traceparent and the worker's span cannot join the trace; set Config.Propagator or the global one "+
		"(otel.SetTextMapPropagator(propagation.TraceContext{})), which is OpenTelemetry's no-op until a program sets it. "+
		"Said once per dispatcher")
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

// attempt makes one call of method (CreateTask, GetTask, DeleteTask) of
// an operation whose span is in ctx. A code in fine (the method's expected
// refusal, such as CreateTask's ALREADY_EXISTS) is not an error.
//
// A span costs the SDK several times what an event does, and most
// operations make one call: a first call that was answered (anything but
// a code worth retrying) is an event on the operation's span. An operation
// whose first call failed with a transient code gets a client span per
// call, the first backdated to when it started, each with its number, its
// backoff and its gRPC code (ADR 0014). Without an operation span to hold
// the event (no recording span, or the caller's, see callSpans), every
// call is a span.
func (d *Dispatcher) attempt(ctx context.Context, method string, t try, fine codes.Code, call func(context.Context) error) error {
	tr := d.tracer.Get()
	if tr == nil {
		return call(ctx)
	}
	op := trace.SpanFromContext(ctx)
	if t.n > 1 || !op.IsRecording() || ctx.Value(callSpansKey{}) != nil {
		ctx, span := startAttempt(ctx, tr, method, t, time.Time{})
		err := call(ctx)
		endAttempt(span, err, fine)
		return err
	}
	start := time.Now()
	err := call(ctx)
	code := codeOf(err)
	if !transient(code) {
		op.AddEvent(rpcName(method), answerEvent(code, err != nil && code != fine))
		return err
	}
	_, span := startAttempt(ctx, tr, method, t, start)
	endAttempt(span, err, fine)
	return err
}

// callSpansKey marks a context whose span is not one of the dispatcher's
// operations: the relay creates tasks under its caller's span.
type callSpansKey struct{}

// callSpans returns ctx marked so that each call made in it is a span of
// its own, never an event on a span another program owns.
func callSpans(ctx context.Context) context.Context {
	return context.WithValue(ctx, callSpansKey{}, true)
}

// answerEvents are the attributes of the event of a call answered at once,
// by gRPC code, made once: [code][0] for an answer that is no error,
// [code][1] for one that is (with error.type).
var answerEvents = func() (ev [codes.Unauthenticated + 1][2]trace.EventOption) {
	for c := range ev {
		code := codes.Code(c)
		ev[c][0] = trace.WithAttributes(semconv.RPCResponseStatusCode(code.String()))
		ev[c][1] = trace.WithAttributes(semconv.RPCResponseStatusCode(code.String()), semconv.ErrorTypeKey.String(code.String()))
	}
	return ev
}()

// answerEvent returns the attributes of the event of a call answered at
// once with code, failed or not.
func answerEvent(code codes.Code, failed bool) trace.EventOption {
	f := 0
	if failed {
		f = 1
	}
	if int(code) < len(answerEvents) {
		return answerEvents[code][f]
	}
	if failed {
		return trace.WithAttributes(semconv.RPCResponseStatusCode(code.String()), semconv.ErrorTypeKey.String(code.String()))
	}
	return trace.WithAttributes(semconv.RPCResponseStatusCode(code.String()))
}

// startAttempt starts the client span of a call of method: its number
// and the wait before it. start, when not zero, is when the call began.
func startAttempt(ctx context.Context, tr trace.Tracer, method string, t try, start time.Time) (context.Context, trace.Span) {
	name := rpcName(method)
	return tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start), trace.WithAttributes(
		semconv.RPCSystemNameGRPC,
		semconv.RPCMethod(name),
		tracing.KeyAttempt.Int(t.n),
		tracing.KeyBackoff.Float64(t.backoff.Seconds()),
	))
}

// endAttempt ends the span of an attempt that answered err; a code in fine
// is not an error.
func endAttempt(span trace.Span, err error, fine codes.Code) {
	code := codeOf(err)
	span.SetAttributes(semconv.RPCResponseStatusCode(code.String()))
	if err != nil && code != fine {
		span.SetAttributes(semconv.ErrorTypeKey.String(code.String()))
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
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
