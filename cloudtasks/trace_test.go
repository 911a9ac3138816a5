package cloudtasks

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// tracedBundle is a dispatcher's world with a span recorder.
type tracedBundle struct {
	emu emuBackend
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
	box *outbox.Memory
}

func newTraced(t *testing.T) *tracedBundle {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	return &tracedBundle{emu: startEmulator(t), rec: rec, tp: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), box: outbox.NewMemory(nil)}
}

// open opens a dispatcher over the bundle's outbox, as a process would
// after a restart; edit may change its config.
func (b *tracedBundle) open(t *testing.T, edit func(*Config)) *Dispatcher {
	t.Helper()
	cfg := testConfig()
	cfg.Client, cfg.TracerProvider, cfg.Propagator = b.emu.client(t), b.tp, propagation.TraceContext{}
	if edit != nil {
		edit(&cfg)
	}
	d, err := NewDispatcher(context.Background(), b.box, &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	return d
}

// under returns a context in a new root span of the bundle's provider,
// standing for the caller's own trace.
func (b *tracedBundle) under(t *testing.T, name string) (context.Context, trace.Span) {
	t.Helper()
	ctx, span := b.tp.Tracer("caller").Start(context.Background(), name, trace.WithNewRoot())
	t.Cleanup(func() { span.End() })
	return ctx, span
}

// taskHeaders returns the HTTP headers of the stored task name.
func taskHeaders(t *testing.T, emu *emulator.Server, name string) map[string]string {
	t.Helper()
	for _, task := range emu.Tasks(testQueue) {
		if task.GetName() == name {
			return task.GetHttpRequest().GetHeaders()
		}
	}
	t.Fatalf("no task %s", name)
	return nil
}

func spansNamed(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func spanAttr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func linkedTo(s sdktrace.ReadOnlySpan, sc trace.SpanContext) bool {
	for _, l := range s.Links() {
		if l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID() {
			return true
		}
	}
	return false
}

// The same ID dispatched again under another trace, by the same
// dispatcher and after a restart, is a repeat: already_existed, not a
// conflict, with a span linked to the one the intent was recorded under.
func TestRepeatUnderAnotherTraceIsARepeat(t *testing.T) {
	t.Parallel()
	b := newTraced(t)
	d := b.open(t, nil)
	req := request("run1", "a", 1, `{"x":1}`)

	ctx1, span1 := b.under(t, "first caller")
	first, err := d.Dispatch(ctx1, req)
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, first.Outcome)
	require.NoError(t, d.Close(context.Background()))
	header := taskHeaders(t, b.emu.Server, first.TaskName)["traceparent"]
	require.True(t, strings.HasPrefix(header, "00-"+span1.SpanContext().TraceID().String()+"-"), header)

	producer := spansNamed(b.rec.Ended(), "dispatch default")[0]
	require.Equal(t, "00-"+producer.SpanContext().TraceID().String()+"-"+producer.SpanContext().SpanID().String()+"-01", header)
	for _, again := range []*Dispatcher{b.open(t, nil), b.open(t, nil)} {
		ctx2, _ := b.under(t, "second caller")
		res, err := again.Dispatch(ctx2, req)
		require.NoError(t, err)
		require.Equal(t, OutcomeAlreadyExisted, res.Outcome)
		require.True(t, res.Skipped)
	}
	repeats := spansNamed(b.rec.Ended(), "dispatch default")[1:]
	require.Len(t, repeats, 2)
	for _, s := range repeats {
		require.NotEqual(t, producer.SpanContext().TraceID(), s.SpanContext().TraceID())
		require.True(t, linkedTo(s, producer.SpanContext()), "a repeat links to the recorded intent's span")
		require.Equal(t, "already_existed", spanAttr(s, "ctdispatch.outcome").AsString())
		require.True(t, spanAttr(s, "ctdispatch.skipped").AsBool())
	}
	latest, _, err := b.box.Latest(context.Background(), outbox.TableDispatch, first.ID)
	require.NoError(t, err)
	require.Equal(t, producer.SpanContext().TraceID().String(), latest.TraceID)
	require.Equal(t, producer.SpanContext().SpanID().String(), latest.SpanID)
}

// A caller that joins another caller's flight makes no call; its span
// links to the leader's, which holds the one call as an event.
func TestJoinedCallLinksToTheLeader(t *testing.T) {
	t.Parallel()
	b := newTraced(t)
	gate := NewGate(b.emu.client(t), "CreateTask")
	d := b.open(t, func(c *Config) { c.Client = gate })
	req := request("run1", "a", 1, "x")
	ctx1, _ := b.under(t, "leader")
	ctx2, _ := b.under(t, "follower")
	leader := dispatchAsync(ctx1, d, req)
	gate.Reached(t)
	follower := dispatchAsync(ctx2, d, req)
	close(gate.Open)
	require.NoError(t, receive(t, leader, "the leader").err)
	got := receive(t, follower, "the follower")
	require.NoError(t, got.err)
	require.Equal(t, 0, got.res.Calls)

	spans := spansNamed(b.rec.Ended(), "dispatch default")
	require.Len(t, spans, 2)
	var lead, follow sdktrace.ReadOnlySpan
	for _, s := range spans {
		if spanAttr(s, "ctdispatch.outcome").AsString() == "created" {
			lead = s
		} else {
			follow = s
		}
	}
	require.NotNil(t, lead)
	require.NotNil(t, follow)
	require.True(t, linkedTo(follow, lead.SpanContext()))
	require.Equal(t, []string{"google.cloud.tasks.v2.CloudTasks/CreateTask rpc.response.status_code=OK"}, eventsOf(lead))
	require.Empty(t, eventsOf(follow))
	require.Empty(t, spansNamed(b.rec.Ended(), "google.cloud.tasks.v2.CloudTasks/CreateTask"), "one call, answered at once: no attempt span")
}

// A BatchCreateTasks request is a span of its own, linked to the span of
// every call it carries: the producer span, whose one call it was.
func TestBatchSpanLinksToEveryCaller(t *testing.T) {
	t.Parallel()
	b := newTraced(t)
	gate := NewGate(b.emu.client(t), "CreateTask")
	d := b.open(t, func(c *Config) { c.Client, c.Batch = gate, true })
	ctx := context.Background()
	first := dispatchAsync(ctx, d, request("run1", "t", 0, "x"))
	gate.Reached(t)
	const n = 3
	var herd []<-chan answer
	for i := 1; i <= n; i++ {
		herd = append(herd, dispatchAsync(ctx, d, request("run1", "t", uint64(i), "x")))
	}
	queued(t, d, n)
	close(gate.Open)
	require.NoError(t, receive(t, first, "the first call").err)
	for _, ch := range herd {
		require.NoError(t, receive(t, ch, "a batched call").err)
	}
	spans := b.rec.Ended()
	batches := spansNamed(spans, "send default")
	require.Len(t, batches, 1)
	require.Equal(t, int64(n), spanAttr(batches[0], "messaging.batch.message_count").AsInt64())
	require.Len(t, batches[0].Links(), n)
	require.Empty(t, spansNamed(spans, "google.cloud.tasks.v2.CloudTasks/CreateTask"), "no call was retried")
	producers := spansNamed(spans, "dispatch default")
	require.Len(t, producers, n+1)
	linked := 0
	for _, p := range producers {
		require.Equal(t, []string{"google.cloud.tasks.v2.CloudTasks/CreateTask rpc.response.status_code=OK"}, eventsOf(p))
		if linkedTo(batches[0], p.SpanContext()) {
			linked++
		}
	}
	require.Equal(t, n, linked)
}

// A header the caller set is left as it is; the injected ones count
// against the header limit.
func TestTraceHeadersAndTheirSize(t *testing.T) {
	t.Parallel()
	b := newTraced(t)
	d := b.open(t, nil)
	ctx, _ := b.under(t, "caller")

	own := "00-11111111111111111111111111111111-2222222222222222-01"
	req := request("run1", "own", 1, "x")
	req.Task.Headers = map[string]string{"TraceParent": own}
	res, err := d.Dispatch(ctx, req)
	require.NoError(t, err)
	h := taskHeaders(t, b.emu.Server, res.TaskName)
	require.Equal(t, own, h["TraceParent"])
	require.NotContains(t, h, "traceparent")

	// Headers exactly at the limit pass without a trace and fail with one.
	big := request("run1", "big", 1, "x")
	big.Task.Headers = map[string]string{"X-Pad": strings.Repeat("p", MaxHeaderBytes-len("X-Pad")-4)}
	untraced := b.open(t, func(c *Config) { c.TracerProvider = noop.NewTracerProvider() })
	_, err = untraced.Dispatch(context.Background(), big)
	require.NoError(t, err)
	big.TaskKey = "big2"
	_, err = d.Dispatch(ctx, big)
	require.EqualError(t, err, `cloudtasks: Headers "80070 bytes" exceed 80000 bytes with the 70 bytes of trace context headers the propagator adds`)
	require.ErrorIs(t, err, ErrInvalidRequest)
}

// Cancel and Recover have spans; a record's resolution links to the span
// its intent was recorded under. Attempts of a retried call are errored
// children; a call answered at once is an event of its operation.
func TestCancelAndRecoverSpans(t *testing.T) {
	t.Parallel()
	b := newTraced(t)
	d := b.open(t, func(c *Config) { c.Retry = RetryPolicy{Initial: 1, Max: 1, Jitter: -1, MaxCalls: 2} })
	require.NoError(t, b.emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{{Methods: []string{"CreateTask"}, Rate: 1, Code: codes.Unavailable, CommitThenFail: true}}}))
	ctx, _ := b.under(t, "caller")
	_, err := d.Dispatch(ctx, request("run1", "a", 1, "x"))
	require.ErrorIs(t, err, ErrGaveUp)
	require.NoError(t, b.emu.SetFaults(emulator.Faults{}))
	producer := spansNamed(b.rec.Ended(), "dispatch default")[0]
	require.Equal(t, otelcodes.Error, producer.Status().Code)
	require.Equal(t, "gave_up", spanAttr(producer, "error.type").AsString())
	attempts := spansNamed(b.rec.Ended(), "google.cloud.tasks.v2.CloudTasks/CreateTask")
	require.Len(t, attempts, 2)
	for i, a := range attempts {
		require.Equal(t, int64(i+1), spanAttr(a, "ctdispatch.attempt").AsInt64())
		require.Equal(t, producer.SpanContext().SpanID(), a.Parent().SpanID())
		require.Equal(t, otelcodes.Error, a.Status().Code)
		require.Equal(t, "Unavailable", spanAttr(a, "error.type").AsString())
	}
	require.Empty(t, eventsOf(producer))
	require.NoError(t, d.Close(context.Background()))

	d = b.open(t, func(c *Config) { c.StaleAfter = 1 })
	st, err := d.Recover(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, st.Found)
	resolved := spansNamed(b.rec.Ended(), "recover default")
	require.Len(t, resolved, 1)
	require.True(t, linkedTo(resolved[0], producer.SpanContext()))
	require.Equal(t, "already_existed", spanAttr(resolved[0], "ctdispatch.outcome").AsString())
	pass := spansNamed(b.rec.Ended(), "recover")
	require.Len(t, pass, 1)
	require.Equal(t, pass[0].SpanContext().SpanID(), resolved[0].Parent().SpanID())
	require.Equal(t, []string{"google.cloud.tasks.v2.CloudTasks/GetTask rpc.response.status_code=OK"}, eventsOf(resolved[0]))
	require.Empty(t, spansNamed(b.rec.Ended(), "google.cloud.tasks.v2.CloudTasks/GetTask"))
	// The recorded outcome keeps the intent's trace.
	latest, _, err := b.box.Latest(context.Background(), outbox.TableDispatch, "dispatch:run1:a:1")
	require.NoError(t, err)
	require.Equal(t, outbox.StatusAlreadyExisted, latest.Status)
	require.Equal(t, producer.SpanContext().TraceID().String(), latest.TraceID)

	res, err := d.Cancel(ctx, "dispatch:run1:a:1", "")
	require.NoError(t, err)
	require.Equal(t, CancelDeleted, res.Outcome)
	cancels := spansNamed(b.rec.Ended(), "cancel")
	require.Len(t, cancels, 1)
	require.Equal(t, "deleted", spanAttr(cancels[0], "ctdispatch.outcome").AsString())
	require.Equal(t, []string{"google.cloud.tasks.v2.CloudTasks/DeleteTask rpc.response.status_code=OK"}, eventsOf(cancels[0]))
	require.Empty(t, spansNamed(b.rec.Ended(), "google.cloud.tasks.v2.CloudTasks/DeleteTask"))
}

// The dispatcher's log lines carry the trace and span IDs of the call.
func TestLogLinesCarryTheTrace(t *testing.T) {
	t.Parallel()
	b := newTraced(t)
	var logs bytes.Buffer
	d := b.open(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	ctx, _ := b.under(t, "caller")
	_, err := d.Dispatch(ctx, request("run1", "a", 1, "x"))
	require.NoError(t, err)
	producer := spansNamed(b.rec.Ended(), "dispatch default")[0]
	require.Contains(t, logs.String(), `msg=dispatched id=dispatch:run1:a:1 outcome=created calls=1 trace_id=`+
		producer.SpanContext().TraceID().String()+" span_id="+producer.SpanContext().SpanID().String())
}

// A dispatcher that opens its own client turns the client's gRPC spans
// off, even under the global provider the client's instrumentation uses:
// a call answered at once shows as the producer span's event, and no
// client span repeats it. Not parallel: it sets the global provider and
// propagator.
func TestClientSpansNotDuplicated(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })

	emu := startEmulator(t)
	cfg := testConfig()
	cfg.EmulatorAddr = emu.Addr()
	d, err := NewDispatcher(context.Background(), outbox.NewMemory(nil), &cfg)
	require.NoError(t, err)
	res, err := d.Dispatch(context.Background(), request("run1", "a", 1, "x"))
	require.NoError(t, err)
	require.NoError(t, d.Close(context.Background()))

	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
	}
	require.Equal(t, []string{"dispatch default"}, names)
	require.Equal(t, []string{"google.cloud.tasks.v2.CloudTasks/CreateTask rpc.response.status_code=OK"}, eventsOf(rec.Ended()[0]))
	require.Contains(t, taskHeaders(t, emu.Server, res.TaskName), "traceparent", "the global propagator is the default")
}

// A call with a span whose task leaves without trace context (the default
// propagator is OpenTelemetry's no-op until a program sets one) is logged
// once per dispatcher, on the first such call; a propagator that writes,
// or a call with no span to send, says nothing.
func TestWarnsOnceWhenNoTraceContextLeaves(t *testing.T) {
	t.Parallel()
	const warning = "trace context not propagated: the propagator wrote no header for a call with a span, so its task " +
		"carries no traceparent and the worker's span cannot join the trace; set Config.Propagator or the global one " +
		"(otel.SetTextMapPropagator(propagation.TraceContext{})), which is OpenTelemetry's no-op until a program sets it. " +
		"Said once per dispatcher"
	tests := []struct {
		name string
		// traced: the dispatcher's spans go to the recorder; otherwise
		// they are off (the no-op provider).
		traced bool
		prop   propagation.TextMapPropagator // nil: the global, unset
		// spans: whether each of the calls, in order, comes with a
		// caller's span.
		spans []bool
		// warnAt is the call (from 0) that logs the warning, -1 for none.
		warnAt      int
		traceparent bool
	}{
		{name: "global no-op propagator", traced: true, spans: []bool{true, true, true}, warnAt: 0},
		{name: "global no-op propagator, no caller span", traced: true, spans: []bool{false, false}, warnAt: 0},
		{name: "W3C propagator", traced: true, prop: propagation.TraceContext{}, spans: []bool{true, false}, warnAt: -1, traceparent: true},
		{name: "a propagator that writes nothing", traced: true, prop: propagation.Baggage{}, spans: []bool{true, true}, warnAt: 0},
		{name: "no span to send", spans: []bool{false, false}, warnAt: -1},
		{name: "first span on the second call", spans: []bool{false, true, true}, warnAt: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newTraced(t)
			var logs bytes.Buffer
			noTime := func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}
			d := b.open(t, func(c *Config) {
				c.Propagator = tt.prop
				if !tt.traced {
					c.TracerProvider = noop.NewTracerProvider()
				}
				c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: noTime}))
			})
			var want []string
			for i, withSpan := range tt.spans {
				ctx := context.Background()
				if withSpan {
					ctx, _ = b.under(t, "caller")
				}
				res, err := d.Dispatch(ctx, request("run1", "a", uint64(i), "x"))
				require.NoError(t, err)
				require.Equal(t, tt.traceparent, taskHeaders(t, b.emu.Server, res.TaskName)["traceparent"] != "")
				if i != tt.warnAt {
					continue
				}
				// The line carries the IDs of the call's span: the
				// dispatcher's producer span, or the caller's.
				sc := trace.SpanContextFromContext(ctx)
				if tt.traced {
					sc = spansNamed(b.rec.Ended(), "dispatch default")[i].SpanContext()
				}
				want = append(want, fmt.Sprintf("level=WARN msg=%q trace_id=%s span_id=%s", warning, sc.TraceID(), sc.SpanID()))
			}
			var got []string
			if s := strings.TrimSpace(logs.String()); s != "" {
				got = strings.Split(s, "\n")
			}
			require.Equal(t, want, got)
		})
	}
}

// failFirstCreate fails the first CreateTask with code before it reaches
// the service, then passes every call through.
type failFirstCreate struct {
	Client
	code   codes.Code
	failed atomic.Bool
}

func (c *failFirstCreate) CreateTask(ctx context.Context, req *cloudtaskspb.CreateTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error) {
	if !c.failed.Swap(true) {
		return nil, status.Error(c.code, "first call refused")
	}
	return c.Client.CreateTask(ctx, req, opts...)
}

// eventsOf lists a span's events as "name code error.type".
func eventsOf(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		line := e.Name
		for _, kv := range e.Attributes {
			line += " " + string(kv.Key) + "=" + kv.Value.String()
		}
		out = append(out, line)
	}
	return out
}

// A call answered at its first attempt is an event on the operation's
// span; an operation whose first attempt failed with a code worth retrying
// has a client span per attempt, the first backdated to its start.
func TestAttemptSpansOnlyWhenRetried(t *testing.T) {
	t.Parallel()
	const create = "google.cloud.tasks.v2.CloudTasks/CreateTask"
	tests := []struct {
		name      string
		failFirst codes.Code // OK: no failure
		exists    bool       // the task exists already: ALREADY_EXISTS
		events    []string
		// attempts: each attempt span's status code, in order.
		attempts []string
		outcome  string
	}{
		{name: "answered at once", events: []string{create + " rpc.response.status_code=OK"}, outcome: "created"},
		{name: "already exists", exists: true, events: []string{create + " rpc.response.status_code=AlreadyExists"}, outcome: "already_existed"},
		{name: "refused at once", failFirst: codes.PermissionDenied,
			events: []string{create + " rpc.response.status_code=PermissionDenied error.type=PermissionDenied"}, outcome: "failed"},
		{name: "retried", failFirst: codes.Unavailable, attempts: []string{"Unavailable", "OK"}, outcome: "created"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newTraced(t)
			var client Client = b.emu.client(t)
			if tt.failFirst != codes.OK {
				client = &failFirstCreate{Client: client, code: tt.failFirst}
			}
			req := request("run1", "a", 1, "x")
			if tt.exists {
				_, err := b.open(t, func(c *Config) { c.TracerProvider = noop.NewTracerProvider() }).Dispatch(context.Background(), req)
				require.NoError(t, err)
				b.box = outbox.NewMemory(nil) // forget it: the next call meets the service's task
			}
			d := b.open(t, func(c *Config) { c.Client, c.Retry = client, RetryPolicy{Initial: 1, Max: 1, Jitter: -1} })
			_, _ = d.Dispatch(context.Background(), req)

			producers := spansNamed(b.rec.Ended(), "dispatch default")
			require.Len(t, producers, 1)
			require.Equal(t, tt.outcome, spanAttr(producers[0], "ctdispatch.outcome").AsString())
			require.Equal(t, tt.events, eventsOf(producers[0]))
			attempts := spansNamed(b.rec.Ended(), create)
			var got []string
			for i, a := range attempts {
				require.Equal(t, producers[0].SpanContext().SpanID(), a.Parent().SpanID())
				require.Equal(t, int64(i+1), spanAttr(a, "ctdispatch.attempt").AsInt64())
				require.Equal(t, trace.SpanKindClient, a.SpanKind())
				require.False(t, a.StartTime().Before(producers[0].StartTime()))
				if i > 0 {
					require.False(t, a.StartTime().Before(attempts[i-1].EndTime()), "attempts follow each other")
				}
				got = append(got, spanAttr(a, "rpc.response.status_code").AsString())
			}
			require.Equal(t, tt.attempts, got)
		})
	}
}
