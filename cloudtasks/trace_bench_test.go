package cloudtasks

import (
	"context"
	"syscall"
	"testing"
	"time"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/google/uuid"
	"github.com/googleapis/gax-go/v2"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// instantClient answers every CreateTask at once, so a benchmark over it
// measures the dispatcher's own CPU and nothing of a service's.
type instantClient struct{}

func (instantClient) CreateTask(_ context.Context, req *cloudtaskspb.CreateTaskRequest, _ ...gax.CallOption) (*cloudtaskspb.Task, error) {
	return req.GetTask(), nil
}

func (instantClient) GetTask(context.Context, *cloudtaskspb.GetTaskRequest, ...gax.CallOption) (*cloudtaskspb.Task, error) {
	return nil, status.Error(codes.Unimplemented, "instantClient creates only")
}

func (instantClient) DeleteTask(context.Context, *cloudtaskspb.DeleteTaskRequest, ...gax.CallOption) error {
	return status.Error(codes.Unimplemented, "instantClient creates only")
}

func (instantClient) BatchCreateTasks(context.Context, *cloudtaskspb.BatchCreateTasksRequest, ...gax.CallOption) (*ctapi.BatchCreateTasksOperation, error) {
	return nil, status.Error(codes.Unimplemented, "instantClient creates only")
}

// discardExporter is the no-op sink of the batching span processor.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// cpuTime is the CPU time, user and system, this process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// tracingProviders are the two ways the tracing benchmarks run: the no-op
// provider, and the SDK sampling every span into a batching processor
// whose exporter drops them.
func tracingProviders(b *testing.B) []struct {
	name string
	tp   trace.TracerProvider
} {
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
	b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	return []struct {
		name string
		tp   trace.TracerProvider
	}{{"noop", noop.NewTracerProvider()}, {"sdk-batch", sdk}}
}

// BenchmarkTracingCost measures the CPU one Dispatch costs its process
// (cpu-ns/op, user and system time), with the no-op tracer provider and
// with the SDK exporting every span through a batching processor to a sink
// that drops them: the ratio of the two is what tracing adds to a call.
// "instant" is a client that answers at once (the dispatcher's own CPU
// only); "emulator" calls the in-process emulator over gRPC, whose server
// side counts too. The outbox is in memory either way.
func BenchmarkTracingCost(b *testing.B) {
	emu := startEmulator(b)
	for _, p := range tracingProviders(b) {
		for _, c := range []struct {
			name   string
			client Client
		}{{"instant", instantClient{}}, {"emulator", emu.client(b)}} {
			b.Run(c.name+"/"+p.name, func(b *testing.B) {
				cfg := testConfig()
				cfg.Client, cfg.TracerProvider, cfg.Propagator = c.client, p.tp, propagation.TraceContext{}
				d, err := NewDispatcher(context.Background(), outbox.NewMemory(nil), &cfg)
				require.NoError(b, err)
				defer d.Close(context.Background())
				ctx := context.Background()
				task := Task{URL: "https://worker.example/run", Body: []byte(`{"table":"orders","day":"2026-01-01"}`)}
				run := uuid.NewString()
				b.ReportAllocs()
				b.ResetTimer()
				start := cpuTime(b)
				for i := range b.N {
					req := DispatchRequest{RunID: run, TaskKey: "t", Identity: naming.Attempt(uint64(i)), Task: task}
					if _, err := d.Dispatch(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
