package cloudtasks

// The helpers here are shared by this package's internal tests and, being
// exported from a test file, by the external ones (cloudtasks_test).

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// GateClient holds every call of one method at a gate until Open is closed
// or the call's context ends, and reports each call that reaches the gate.
type GateClient struct {
	Client
	method  string
	entered chan string
	Open    chan struct{}
}

// NewGate returns a gate in front of c for the calls of method.
func NewGate(c Client, method string) *GateClient {
	return &GateClient{Client: c, method: method, entered: make(chan string, 16), Open: make(chan struct{})}
}

func (g *GateClient) hold(ctx context.Context, method string) error {
	if method != g.method {
		return nil
	}
	g.entered <- method
	select {
	case <-g.Open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *GateClient) CreateTask(ctx context.Context, req *cloudtaskspb.CreateTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error) {
	if err := g.hold(ctx, "CreateTask"); err != nil {
		return nil, err
	}
	return g.Client.CreateTask(ctx, req, opts...)
}

func (g *GateClient) GetTask(ctx context.Context, req *cloudtaskspb.GetTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error) {
	if err := g.hold(ctx, "GetTask"); err != nil {
		return nil, err
	}
	return g.Client.GetTask(ctx, req, opts...)
}

// Reached waits until a call reached the gate, failing the test instead of
// hanging when none does.
func (g *GateClient) Reached(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s call reached the gate", g.method)
	}
}

// Counter sums the data points of an Int64 counter whose attributes
// include every pair of want.
func Counter(t testing.TB, r *sdkmetric.ManualReader, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			require.True(t, ok, "%s is not an int64 sum", name)
		points:
			for _, dp := range sum.DataPoints {
				for _, kv := range want {
					if v, ok := dp.Attributes.Value(kv.Key); !ok || v != kv.Value {
						continue points
					}
				}
				total += dp.Value
			}
		}
	}
	return total
}
