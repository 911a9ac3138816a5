package cloudtasks

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ctdispatch/ctdispatch/outbox"
)

type testBundle struct {
	fake   *fakeServer
	root   string
	box    *outbox.Outbox
	d      *Dispatcher
	reader *sdkmetric.ManualReader
}

// testConfig is the config every test starts from.
func testConfig() Config {
	return Config{Project: "proj", Location: "europe-west1", Queue: "default"}
}

// setup starts a fake server and a dispatcher with a durable outbox in a
// temporary directory. edit may change the config first.
func setup(t testing.TB, edit func(*Config)) *testBundle {
	t.Helper()
	b := &testBundle{fake: startFake(t), root: t.TempDir()}
	b.d, b.box, b.reader = b.newDispatcher(t, edit)
	return b
}

// newDispatcher opens another dispatcher (its own processor UUID and outbox
// handle) on the bundle's server and outbox root.
func (b *testBundle) newDispatcher(t testing.TB, edit func(*Config)) (*Dispatcher, *outbox.Outbox, *sdkmetric.ManualReader) {
	t.Helper()
	ctx := context.Background()
	cfg := testConfig()
	cfg.ProcessorUUID = uuid.Must(uuid.NewV7())
	reader := sdkmetric.NewManualReader()
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg.Client = b.fake.client(t)
	if edit != nil {
		edit(&cfg)
	}
	box, err := outbox.Open(ctx, outbox.Options{Root: b.root, ProcessorUUID: cfg.ProcessorUUID, Clock: cfg.Clock})
	require.NoError(t, err)
	t.Cleanup(func() { box.Close() })
	cfg.Outbox = box
	d, err := NewDispatcher(ctx, &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d, box, reader
}

// counter sums the data points of an Int64 counter whose attributes include
// every pair of want.
func counter(t testing.TB, r *sdkmetric.ManualReader, name string, want ...attribute.KeyValue) int64 {
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

// history returns every record of an ID, oldest first.
func history(t testing.TB, box *outbox.Outbox, id string) []outbox.Record {
	t.Helper()
	recs, err := box.Lookup(context.Background(), outbox.Query{ID: id, History: true})
	require.NoError(t, err)
	return recs
}

func statuses(recs []outbox.Record) []outbox.Status {
	out := make([]outbox.Status, len(recs))
	for i, r := range recs {
		out[i] = r.Status
	}
	return out
}
