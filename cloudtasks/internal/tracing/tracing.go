// Package tracing holds what the dispatcher and the worker share about
// OpenTelemetry tracing: resolving the configured or global tracer and
// propagator so that a program that set neither pays nothing, the
// attribute names of ADR 0014, the trace context kept in an outbox record,
// and a slog handler that stamps log records with the current span.
package tracing

import (
	"context"
	"log/slog"
	"net/textproto"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// unsetProvider and unsetPropagator are the global provider and propagator
// as the otel package starts: stand-ins that make only non-recording spans
// and inject nothing until a program sets real ones.
var (
	unsetProvider   = otel.GetTracerProvider()
	unsetPropagator = otel.GetTextMapPropagator()
)

// Scope is the instrumentation scope of the spans of ctdispatch.
const Scope = "github.com/ctdispatch/ctdispatch"

// The attribute names ADR 0014 chose where OpenTelemetry's messaging and
// RPC conventions name none for Cloud Tasks.
const (
	// System is the messaging.system value for Cloud Tasks.
	System = "gcp_cloud_tasks"
	// KeyID is the task's internal ID (dispatch:… or timer:…).
	KeyID = attribute.Key("ctdispatch.id")
	// KeyOutcome is what a call or a delivery came to: a Dispatch's
	// outcome, a Cancel's, a Recover verdict, or a worker's outcome.
	KeyOutcome = attribute.Key("ctdispatch.outcome")
	// KeySkipped is true when the outbox answered without a call.
	KeySkipped = attribute.Key("ctdispatch.skipped")
	// KeyCalls counts the create calls a Dispatch made.
	KeyCalls = attribute.Key("ctdispatch.calls")
	// KeyAttempt numbers a call among the retries of one operation, from 1.
	KeyAttempt = attribute.Key("ctdispatch.attempt")
	// KeyBackoff is the wait, in seconds, before this attempt (0 for the
	// first).
	KeyBackoff = attribute.Key("ctdispatch.backoff_s")
	// KeyRetryCount is a delivery's X-CloudTasks-TaskRetryCount.
	KeyRetryCount = attribute.Key("ctdispatch.delivery.retry_count")
	// KeyExecutionCount is a delivery's X-CloudTasks-TaskExecutionCount.
	KeyExecutionCount = attribute.Key("ctdispatch.delivery.execution_count")
	// KeyJoined is true on the span of a call that joined another call's
	// flight instead of doing the work; its link points at the leader.
	KeyJoined = attribute.Key("ctdispatch.joined")
)

// Tracer resolves a configured tracer provider, or the global one at each
// use, so that a provider set with otel.SetTracerProvider after the
// dispatcher or worker was made is still used. Get returns nil when spans
// would all be non-recording anyway (the no-op provider, or the global
// one before a program set it), so the callers skip the work.
type Tracer struct {
	fixed  trace.Tracer // nil: the global provider
	off    bool
	global atomic.Pointer[globalTracer]
}

type globalTracer struct {
	tp trace.TracerProvider
	tr trace.Tracer
}

// NewTracer returns the tracer of tp; nil means the global provider.
func NewTracer(tp trace.TracerProvider) *Tracer {
	switch tp.(type) {
	case nil:
		return &Tracer{}
	case noop.TracerProvider, *noop.TracerProvider:
		return &Tracer{off: true}
	}
	return &Tracer{fixed: tp.Tracer(Scope)}
}

// Get returns the tracer to start spans with, or nil when none would
// record.
func (t *Tracer) Get() trace.Tracer {
	if t.off {
		return nil
	}
	if t.fixed != nil {
		return t.fixed
	}
	tp := otel.GetTracerProvider()
	if tp == unsetProvider {
		return nil
	}
	if g := t.global.Load(); g != nil && g.tp == tp {
		return g.tr
	}
	g := &globalTracer{tp: tp, tr: tp.Tracer(Scope)}
	t.global.Store(g)
	return g.tr
}

// Propagator resolves a configured propagator, or the global one at each
// use.
type Propagator struct {
	fixed propagation.TextMapPropagator // nil: the global one
}

// NewPropagator returns the propagator p; nil means the global one.
func NewPropagator(p propagation.TextMapPropagator) Propagator { return Propagator{fixed: p} }

// Get returns the propagator, or nil when it injects and extracts nothing
// (the global one before a program set it).
func (p Propagator) Get() propagation.TextMapPropagator {
	if p.fixed != nil {
		return p.fixed
	}
	if g := otel.GetTextMapPropagator(); g != unsetPropagator {
		return g
	}
	return nil
}

// Inject writes the trace context of ctx into headers, the HTTP headers a
// task will carry, and returns how many bytes it added as a header
// counts them (name, value and 4 bytes of separators). A header the
// caller set in given (the task's own headers), in any case, is left as
// it is. wrote is false when the propagator produced no header at all
// (none is set, or the one set carries nothing for ctx), whatever the
// caller's headers: the trace context did not leave.
func (p Propagator) Inject(ctx context.Context, headers, given map[string]string) (added int, wrote bool) {
	prop := p.Get()
	if prop == nil {
		return 0, false
	}
	c := headerCarrier{headers: headers, given: given}
	prop.Inject(ctx, &c)
	return c.added, c.wrote
}

// headerCarrier is where a propagator writes a task's trace headers:
// straight into the task's headers, skipping those the caller set, and
// counting what it adds.
type headerCarrier struct {
	headers, given map[string]string
	added          int
	wrote          bool
}

func (c *headerCarrier) Get(key string) string { return c.headers[key] }

func (c *headerCarrier) Set(key, value string) {
	c.wrote = true
	if hasHeader(c.given, key) {
		return
	}
	if old, ok := c.headers[key]; ok { // set again by the propagator
		c.added -= len(key) + len(old) + 4
	}
	c.headers[key] = value
	c.added += len(key) + len(value) + 4
}

func (c *headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c.headers))
	for k := range c.headers {
		keys = append(keys, k)
	}
	return keys
}

// hasHeader reports whether h names the header name, in any case.
func hasHeader(h map[string]string, name string) bool {
	if len(h) == 0 {
		return false
	}
	if _, ok := h[name]; ok {
		return true
	}
	canon := textproto.CanonicalMIMEHeaderKey(name)
	for k := range h {
		if textproto.CanonicalMIMEHeaderKey(k) == canon {
			return true
		}
	}
	return false
}

// IDs returns the trace and span IDs of sc in hex, or "" and "" when sc
// is not valid: the values an outbox record keeps.
func IDs(sc trace.SpanContext) (traceID, spanID string) {
	if !sc.IsValid() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}

// Stored rebuilds the span context an outbox record kept (its trace_id
// and span_id), as a remote, sampled context: a row that kept the IDs was
// written under a span someone traced. It returns the zero SpanContext
// when the IDs are missing or malformed (rows written before the columns
// existed). Work done later for the record (Recover, the transactional
// relay) links to it or injects it into the task it creates.
func Stored(traceID, spanID string) trace.SpanContext {
	if traceID == "" || spanID == "" {
		return trace.SpanContext{}
	}
	tid, err := trace.TraceIDFromHex(traceID)
	if err != nil {
		return trace.SpanContext{}
	}
	sid, err := trace.SpanIDFromHex(spanID)
	if err != nil {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

// Log keys of the trace and span IDs in log records.
const (
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// LogHandler wraps h so that every record logged with a context that
// carries a valid span also carries its trace_id and span_id.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(logHandler); ok {
		return h
	}
	return logHandler{h}
}

type logHandler struct{ slog.Handler }

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(attrs)}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{h.Handler.WithGroup(name)}
}
