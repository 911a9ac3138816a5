package cloudtasks

import (
	"context"
	"testing"

	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"

	ctapi "cloud.google.com/go/cloudtasks/apiv2"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
)

// testBundle is an emulator and a parquetbox root that the dispatchers of
// an internal test share.
type testBundle struct {
	emu  *emulator.Server
	root string
}

// testConfig is the config every test starts from.
func testConfig() Config {
	return Config{Project: "proj", Location: "europe-west1", Queue: "default"}
}

// testQueue is the queue every test uses.
const testQueue = "projects/proj/locations/europe-west1/queues/default"

// emuBackend is the in-repo emulator with a helper that opens the official
// client on it. Tests that script the service's answers do it with fault
// rules (emulator.Faults), changed between calls with SetFaults.
type emuBackend struct{ *emulator.Server }

// startEmulator starts the in-repo emulator, store-only, with the test queue.
func startEmulator(t testing.TB) emuBackend {
	t.Helper()
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Queues: []emulator.QueueConfig{{Name: testQueue}}})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	return emuBackend{emu}
}

func (e emuBackend) client(t testing.TB) *ctapi.Client {
	t.Helper()
	c, err := e.NewClient(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// newDispatcher opens another dispatcher (its own processor UUID and outbox
// handle) on the bundle's server and outbox root.
func (b *testBundle) newDispatcher(t testing.TB, edit func(*Config)) (*Dispatcher, *parquetbox.Outbox, *sdkmetric.ManualReader) {
	t.Helper()
	ctx := context.Background()
	cfg := testConfig()
	reader := sdkmetric.NewManualReader()
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg.Client = emuBackend{b.emu}.client(t)
	if edit != nil {
		edit(&cfg)
	}
	box, err := parquetbox.Open(ctx, parquetbox.Options{Root: b.root, ProcessorUUID: uuid.Must(uuid.NewV7()), Clock: cfg.Clock})
	require.NoError(t, err)
	t.Cleanup(func() { box.Close() })
	d, err := NewDispatcher(ctx, box, &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	return d, box, reader
}

// settle waits until d has no work in flight: every answered call's
// records are then in the outbox.
func settle(d *Dispatcher) { <-d.flights.quiet() }

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

func request(run, task string, attempt uint64, body string) DispatchRequest {
	return DispatchRequest{
		RunID: run, TaskKey: task, Identity: naming.Attempt(attempt),
		Task: Task{URL: "https://worker.example/run", Body: []byte(body)},
	}
}
