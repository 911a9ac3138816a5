package worker

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Each answered request is counted once under its outcome, and timed.
func TestMetricsCountOutcomes(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	cfg := insecure(NewMemoryInbox())
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	w, err := New(context.Background(), cfg, func(_ context.Context, d *Delivery) error {
		if d.ID.TaskKey() == "bad" {
			return errors.New("try again")
		}
		return nil
	})
	require.NoError(t, err)
	url := serve(t, w)
	for _, key := range []string{"a", "a", "b", "bad"} {
		post(t, url, cloudTasksHeaders(mustID(t, "m", key, "1")), "")
	}
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	counts := map[string]int64{}
	var timed uint64
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, meterName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				require.Equal(t, MetricDeliveries, m.Name)
				for _, p := range data.DataPoints {
					v, _ := p.Attributes.Value(attribute.Key("outcome"))
					counts[v.AsString()] = p.Value
				}
			case metricdata.Histogram[float64]:
				require.Equal(t, MetricDuration, m.Name)
				for _, p := range data.DataPoints {
					timed += p.Count
				}
			}
		}
	}
	require.Equal(t, map[string]int64{"done": 2, "duplicate": 1, "retry": 1}, counts)
	require.Equal(t, uint64(4), timed)
}
