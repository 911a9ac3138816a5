package worker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// discardExporter is the no-op sink of the batching span processor.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkTracingCost is the worker's own cost per delivery (as
// BenchmarkOverhead's unverified case: in process, a handler that does
// nothing) with the no-op tracer provider and with the SDK exporting every
// consumer span through a batching processor to a sink that drops them;
// the request carries a traceparent either way.
func BenchmarkTracingCost(b *testing.B) {
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
	b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	for _, p := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"noop", noop.NewTracerProvider()}, {"sdk-batch", sdk}} {
		b.Run(p.name, func(b *testing.B) {
			cfg := insecure(passInbox{})
			cfg.TracerProvider, cfg.Propagator = p.tp, propagation.TraceContext{}
			w, err := New(context.Background(), cfg, func(context.Context, *Delivery) error { return nil })
			require.NoError(b, err)
			h := cloudTasksHeaders(mustID(b, "bench", "tracing", "1"))
			h.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
			req := httptest.NewRequest(http.MethodPost, "https://worker.example.com/work", http.NoBody)
			req.Header = h
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				w.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
