package cloudtasks

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
)

// meterName is the instrumentation scope of the dispatcher's metrics.
const meterName = "github.com/ctdispatch/ctdispatch/cloudtasks"

// The metric names, each documented in doc.go.
const (
	MetricOutcomes         = "ctdispatch.dispatch.outcomes"
	MetricIdempotentSkips  = "ctdispatch.dispatch.idempotent_skips"
	MetricPayloadConflicts = "ctdispatch.dispatch.payload_conflicts"
	MetricCalls            = "ctdispatch.cloudtasks.calls"
	MetricDuration         = "ctdispatch.dispatch.duration"
	MetricRecoveries       = "ctdispatch.recover.records"
	MetricHandovers        = "ctdispatch.recover.handovers"
)

type metrics struct {
	// attrs caches the attribute options per label pair, so a dispatch does
	// not build them again. Its key is a struct of the four strings, which
	// a lookup builds without allocating.
	attrsMu sync.RWMutex
	attrs   map[labelKey]labelOpts

	outcomes  metric.Int64Counter
	skips     metric.Int64Counter
	conflicts metric.Int64Counter
	calls     metric.Int64Counter
	duration  metric.Float64Histogram
	recovered metric.Int64Counter
	handovers metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	m := mp.Meter(meterName)
	var ms metrics
	var err error
	if ms.outcomes, err = m.Int64Counter(MetricOutcomes,
		metric.WithDescription("Dispatches and timers by kind and outcome (created, already_existed, recovered, failed, cancelled, gave_up).")); err != nil {
		return nil, err
	}
	if ms.skips, err = m.Int64Counter(MetricIdempotentSkips,
		metric.WithDescription("Calls answered from the outbox without a Cloud Tasks call.")); err != nil {
		return nil, err
	}
	if ms.conflicts, err = m.Int64Counter(MetricPayloadConflicts,
		metric.WithDescription("Calls refused because the ID was recorded with another payload.")); err != nil {
		return nil, err
	}
	if ms.calls, err = m.Int64Counter(MetricCalls,
		metric.WithDescription("Cloud Tasks calls by method and gRPC status code.")); err != nil {
		return nil, err
	}
	if ms.duration, err = m.Float64Histogram(MetricDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from Dispatch or ScheduleTimer to its answer, by kind and outcome.")); err != nil {
		return nil, err
	}
	if ms.recovered, err = m.Int64Counter(MetricRecoveries,
		metric.WithDescription("Stale pending records finished by recovery, by kind and result (created, not_found).")); err != nil {
		return nil, err
	}
	if ms.handovers, err = m.Int64Counter(MetricHandovers,
		metric.WithDescription("Records finished by a processor other than the one that left them pending.")); err != nil {
		return nil, err
	}
	return &ms, nil
}

// labelKey names a pair of labels.
type labelKey struct{ k1, v1, k2, v2 string }

// labelOpts are the options that attach one pair of labels to a
// measurement, kept as slices so that passing them (opts...) allocates
// nothing.
type labelOpts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

// labels returns the cached options of the labels {k1=v1, k2=v2}.
func (m *metrics) labels(k1, v1, k2, v2 string) labelOpts {
	key := labelKey{k1, v1, k2, v2}
	m.attrsMu.RLock()
	o, ok := m.attrs[key]
	m.attrsMu.RUnlock()
	if ok {
		return o
	}
	set := metric.WithAttributeSet(attribute.NewSet(attribute.String(k1, v1), attribute.String(k2, v2)))
	o = labelOpts{add: []metric.AddOption{set}, rec: []metric.RecordOption{set}}
	m.attrsMu.Lock()
	if m.attrs == nil {
		m.attrs = map[labelKey]labelOpts{}
	}
	m.attrs[key] = o
	m.attrsMu.Unlock()
	return o
}

func (m *metrics) outcome(ctx context.Context, kind, outcome string, took time.Duration) {
	o := m.labels("kind", kind, "outcome", outcome)
	m.outcomes.Add(ctx, 1, o.add...)
	m.duration.Record(ctx, took.Seconds(), o.rec...)
}

func (m *metrics) call(ctx context.Context, method string, code codes.Code) {
	m.calls.Add(ctx, 1, m.labels("method", method, "code", code.String()).add...)
}

func (m *metrics) kindCount(ctx context.Context, c metric.Int64Counter, kind string) {
	c.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", kind)))
}

// metricAttrs labels a recovery by kind and result.
func metricAttrs(kind, result string) metric.AddOption {
	return metric.WithAttributes(attribute.String("kind", kind), attribute.String("result", result))
}
