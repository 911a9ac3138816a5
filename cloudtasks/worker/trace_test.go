package worker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// failFirstCreate fails the first CreateTask with UNAVAILABLE before it
// reaches the service, then passes every call through.
type failFirstCreate struct {
	cloudtasks.Client
	failed atomic.Bool
}

func (c *failFirstCreate) CreateTask(ctx context.Context, req *cloudtaskspb.CreateTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error) {
	if !c.failed.Swap(true) {
		return nil, status.Error(codes.Unavailable, "first call lost")
	}
	return c.Client.CreateTask(ctx, req, opts...)
}

// attr returns the value of key among a span's attributes, or an invalid
// Value when it has none.
func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// named returns the ended spans called name, in the order they ended.
func named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// One Dispatch, a failed first CreateTask, a delivery the handler asks to
// retry, its redelivery, and a duplicate: one trace, across real HTTP
// deliveries from the emulator. With the worker's defaults every consumer
// span is a child of the producer span and linked to it.
func TestOneTraceFromDispatchToTheEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prop := propagation.TraceContext{}
	e := startEmulator(t)

	var logs bytes.Buffer
	calls := 0
	var handlerSpan trace.SpanContext
	var inner trace.SpanContext
	deliveries := outbox.NewMemory(e.clock)
	var w *Worker
	url := serve(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { w.ServeHTTP(rw, r) })) + "/run"
	wcfg := e.verifiedConfig(url, NewMemoryInbox())
	wcfg.TracerProvider, wcfg.Propagator, wcfg.Outbox = tp, prop, deliveries
	wcfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var err error
	w, err = New(ctx, wcfg, func(ctx context.Context, d *Delivery) error {
		calls++
		handlerSpan = trace.SpanContextFromContext(ctx)
		_, span := tp.Tracer("handler").Start(ctx, "handler work")
		inner = span.SpanContext()
		span.End()
		if calls == 1 {
			return errors.New("not yet")
		}
		return nil
	})
	require.NoError(t, err)

	box := outbox.NewMemory(e.clock)
	d, err := cloudtasks.NewDispatcher(ctx, box, &cloudtasks.Config{
		Project: "p", Location: "l", Queue: testQueueID, Client: &failFirstCreate{Client: e.client},
		Retry: cloudtasks.RetryPolicy{Initial: 1, Max: 1, Jitter: -1}, Clock: e.clock,
		TracerProvider: tp, Propagator: prop,
	})
	require.NoError(t, err)
	res, err := d.Dispatch(ctx, cloudtasks.DispatchRequest{RunID: "run1", TaskKey: "extract", Identity: naming.Attempt(1),
		Task: cloudtasks.Task{URL: url, Body: []byte(`{"n":1}`), OIDC: &cloudtasks.OIDCToken{ServiceAccountEmail: testSA}}})
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)
	require.Equal(t, 2, res.Calls)
	require.NoError(t, d.Close(ctx))

	e.deliverAll(t, 5)
	// A duplicate: the service delivers the finished attempt once more.
	first := e.srv.Deliveries()[0]
	code, body, _ := post(t, url, first.Header.Clone(), string(first.Body))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "duplicate\n", body)
	require.Equal(t, 2, calls)

	spans := rec.Ended()
	producers := named(spans, "dispatch "+testQueueID)
	require.Len(t, producers, 1)
	producer := producers[0]
	require.Equal(t, trace.SpanKindProducer, producer.SpanKind())
	require.Equal(t, "created", attr(producer, "ctdispatch.outcome").AsString())
	require.Equal(t, "send", attr(producer, "messaging.operation.type").AsString())
	require.Equal(t, testQueue, attr(producer, "messaging.destination.name").AsString())
	require.Equal(t, res.CloudTaskID, attr(producer, "messaging.message.id").AsString())
	psc := producer.SpanContext()

	// Each CreateTask attempt is a child; the failed one is an error.
	attempts := named(spans, "google.cloud.tasks.v2.CloudTasks/CreateTask")
	require.Len(t, attempts, 2)
	for i, a := range attempts {
		require.Equal(t, psc.SpanID(), a.Parent().SpanID())
		require.Equal(t, int64(i+1), attr(a, "ctdispatch.attempt").AsInt64())
	}
	require.Equal(t, otelcodes.Error, attempts[0].Status().Code)
	require.Equal(t, "Unavailable", attr(attempts[0], "rpc.response.status_code").AsString())
	require.Equal(t, 0.0, attr(attempts[0], "ctdispatch.backoff_s").AsFloat64())
	require.Equal(t, otelcodes.Unset, attempts[1].Status().Code)
	require.Equal(t, "OK", attr(attempts[1], "rpc.response.status_code").AsString())
	require.Equal(t, 1e-9, attr(attempts[1], "ctdispatch.backoff_s").AsFloat64())

	// The emulator passed the header through as the dispatcher wrote it.
	traceparent := "00-" + psc.TraceID().String() + "-" + psc.SpanID().String() + "-01"
	for _, dl := range e.srv.Deliveries() {
		require.Equal(t, traceparent, dl.Header.Get("Traceparent"))
	}

	// Three consumer spans in the producer's trace, each its child and
	// linked to it: retry, done, duplicate.
	consumers := named(spans, "process "+testQueueID)
	require.Len(t, consumers, 3)
	var outcomes []string
	for _, c := range consumers {
		require.Equal(t, trace.SpanKindConsumer, c.SpanKind())
		require.Equal(t, psc.TraceID(), c.SpanContext().TraceID(), "one trace from Dispatch to the effect")
		require.Equal(t, psc.SpanID(), c.Parent().SpanID())
		require.True(t, c.Parent().IsRemote())
		require.Len(t, c.Links(), 1)
		require.Equal(t, psc.TraceID(), c.Links()[0].SpanContext.TraceID())
		require.Equal(t, psc.SpanID(), c.Links()[0].SpanContext.SpanID())
		outcomes = append(outcomes, attr(c, "ctdispatch.outcome").AsString())
	}
	require.Equal(t, []string{"retry", "done", "duplicate"}, outcomes)
	require.Equal(t, []int64{0, 1, 0}, []int64{
		attr(consumers[0], "ctdispatch.delivery.retry_count").AsInt64(),
		attr(consumers[1], "ctdispatch.delivery.retry_count").AsInt64(),
		attr(consumers[2], "ctdispatch.delivery.retry_count").AsInt64(),
	})
	require.Equal(t, otelcodes.Error, consumers[0].Status().Code)
	require.Equal(t, otelcodes.Unset, consumers[2].Status().Code)

	// The handler ran in the second consumer span; its own span nests.
	require.Equal(t, consumers[1].SpanContext().SpanID(), handlerSpan.SpanID())
	handlerSpans := named(spans, "handler work")
	require.Len(t, handlerSpans, 2)
	require.Equal(t, consumers[1].SpanContext().SpanID(), handlerSpans[1].Parent().SpanID())
	require.Equal(t, inner, handlerSpans[1].SpanContext())

	// Rows lead to the spans: the dispatch's to the producer, each
	// delivery's to its consumer, all in one trace.
	latest, found, err := box.Latest(ctx, outbox.TableDispatch, res.ID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, psc.TraceID().String(), latest.TraceID)
	require.Equal(t, psc.SpanID().String(), latest.SpanID)
	recs, err := outbox.LookupDeliveries(ctx, deliveries, outbox.Query{ID: res.ID})
	require.NoError(t, err)
	require.Len(t, recs, 3)
	for i, r := range recs {
		require.Equal(t, psc.TraceID().String(), r.TraceID)
		require.Equal(t, consumers[i].SpanContext().TraceID().String(), r.TraceID)
		require.Equal(t, consumers[i].SpanContext().SpanID().String(), r.SpanID)
	}

	// The worker's log records carry the consumer span's IDs.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 3)
	for i, line := range lines {
		require.Contains(t, line, "trace_id="+consumers[i].SpanContext().TraceID().String())
		require.Contains(t, line, "span_id="+consumers[i].SpanContext().SpanID().String())
	}
}

// Where a delivery's consumer span hangs: a child of the producer's
// context by default, a trace of its own with TraceLinkOnly, a child of
// the span the request's context already holds either way; linked to the
// producer whenever the request names one.
func TestConsumerSpanParent(t *testing.T) {
	t.Parallel()
	const (
		producerTrace = "0af7651916cd43dd8448eb211c80319c"
		producerSpan  = "b7ad6b7169203331"
	)
	tests := []struct {
		name        string
		linkOnly    bool
		traceparent bool
		serverSpan  bool
		// parent: "producer", "server" or "" (a root span)
		parent string
		linked bool
	}{
		{name: "default", traceparent: true, parent: "producer", linked: true},
		{name: "link only", linkOnly: true, traceparent: true, parent: "", linked: true},
		{name: "server span", traceparent: true, serverSpan: true, parent: "server", linked: true},
		{name: "server span, link only", linkOnly: true, traceparent: true, serverSpan: true, parent: "server", linked: true},
		{name: "no traceparent", parent: "", linked: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			cfg := insecure(NewMemoryInbox())
			cfg.TracerProvider, cfg.Propagator, cfg.TraceLinkOnly = tp, propagation.TraceContext{}, tt.linkOnly
			w, err := New(context.Background(), cfg, func(context.Context, *Delivery) error { return nil })
			require.NoError(t, err)

			h := cloudTasksHeaders(mustID(t, "run1", "extract", "1"))
			if tt.traceparent {
				h.Set("Traceparent", "00-"+producerTrace+"-"+producerSpan+"-01")
			}
			req := httptest.NewRequest(http.MethodPost, "https://worker.example.com/run", strings.NewReader("{}"))
			req.Header = h
			var server trace.SpanContext
			if tt.serverSpan {
				ctx, span := tp.Tracer("server").Start(req.Context(), "POST /run", trace.WithSpanKind(trace.SpanKindServer))
				server = span.SpanContext()
				defer span.End()
				req = req.WithContext(ctx)
			}
			rw := httptest.NewRecorder()
			w.ServeHTTP(rw, req)
			require.Equal(t, http.StatusOK, rw.Code)

			consumers := named(rec.Ended(), "process "+testQueueID)
			require.Len(t, consumers, 1)
			c := consumers[0]
			switch tt.parent {
			case "producer":
				require.Equal(t, producerTrace, c.SpanContext().TraceID().String())
				require.Equal(t, producerSpan, c.Parent().SpanID().String())
				require.True(t, c.Parent().IsRemote())
			case "server":
				require.Equal(t, server.TraceID(), c.SpanContext().TraceID())
				require.Equal(t, server.SpanID(), c.Parent().SpanID())
			default:
				require.False(t, c.Parent().IsValid(), "a root span")
				require.NotEqual(t, producerTrace, c.SpanContext().TraceID().String())
			}
			if !tt.linked {
				require.Empty(t, c.Links())
				return
			}
			require.Len(t, c.Links(), 1)
			require.Equal(t, producerTrace, c.Links()[0].SpanContext.TraceID().String())
			require.Equal(t, producerSpan, c.Links()[0].SpanContext.SpanID().String())
		})
	}
}

// With no provider or propagator configured and none set globally, the
// worker makes no span and records no trace IDs, and still answers.
func TestNoTracingByDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	box := outbox.NewMemory(nil)
	w, err := New(ctx, &Config{InsecureSkipVerify: true, Inbox: NewMemoryInbox(), Outbox: box}, func(context.Context, *Delivery) error { return nil })
	require.NoError(t, err)
	id := mustID(t, "run1", "extract", "1")
	h := cloudTasksHeaders(id)
	h.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	code, body, _ := post(t, serve(t, w), h, "{}")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "done\n", body)
	recs, err := outbox.LookupDeliveries(ctx, box, outbox.Query{ID: id.String()})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "", recs[0].TraceID)
	require.Equal(t, "", recs[0].SpanID)
}
