package worker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the worker's metrics.
const meterName = "github.com/ctdispatch/ctdispatch/cloudtasks/worker"

// The metric names, documented in doc.go.
const (
	// MetricDeliveries counts answered requests by outcome and, for a
	// refused token, by refusal.
	MetricDeliveries = "ctdispatch.worker.deliveries"
	// MetricDuration times requests from arrival to answer, in seconds,
	// by outcome and, for a refused token, by refusal.
	MetricDuration = "ctdispatch.worker.duration"
	// MetricRecordFailures counts delivery records (Config.Outbox) that
	// could not be written, by record: started or outcome.
	MetricRecordFailures = "ctdispatch.worker.record_failures"
)

var allOutcomes = []Outcome{
	OutcomeDone, OutcomeDuplicate, OutcomeFailed, OutcomeRejected, OutcomeRetry, OutcomePanic,
	OutcomeBusy, OutcomeSlowDown, OutcomeUnauthorized, OutcomeForbidden, OutcomeTooLarge, OutcomeKeysUnavailable,
}

type metrics struct {
	deliveries     metric.Int64Counter
	duration       metric.Float64Histogram
	recordFailures metric.Int64Counter
	// attrs holds the attribute option of each outcome, built once.
	attrs map[Outcome]metric.MeasurementOption
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	m := mp.Meter(meterName)
	ms := &metrics{attrs: make(map[Outcome]metric.MeasurementOption, len(allOutcomes))}
	var err error
	if ms.deliveries, err = m.Int64Counter(MetricDeliveries,
		metric.WithDescription("Requests the worker answered, by outcome (done, duplicate, failed, rejected, retry, panic, busy, slow_down, unauthorized, forbidden, too_large, keys_unavailable) and, for a refused token, by refusal (no_token, malformed, algorithm, expired, unknown_key, signature, issuer, audience, email, email_not_verified, keys_unavailable).")); err != nil {
		return nil, err
	}
	if ms.duration, err = m.Float64Histogram(MetricDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from a request's arrival to its answer, by outcome and, for a refused token, by refusal.")); err != nil {
		return nil, err
	}
	if ms.recordFailures, err = m.Int64Counter(MetricRecordFailures,
		metric.WithDescription("Delivery records the worker could not write to its outbox, by record (started, outcome); the answer was not changed.")); err != nil {
		return nil, err
	}
	for _, o := range allOutcomes {
		ms.attrs[o] = metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", string(o))))
	}
	return ms, nil
}

// record counts and times an answered request. A refused one also carries
// its refusal's code, so a dashboard tells a wrong audience from an expired
// token without reading the log; refusals are rare, so their attributes
// are built per request.
func (m *metrics) record(ctx context.Context, o Outcome, r Refusal, took time.Duration) {
	attrs := m.attrs[o]
	if r != "" {
		attrs = metric.WithAttributes(attribute.String("outcome", string(o)), attribute.String("refusal", string(r)))
	}
	m.deliveries.Add(ctx, 1, attrs)
	m.duration.Record(ctx, took.Seconds(), attrs)
}

// recordFailed counts a delivery record that could not be written.
func (m *metrics) recordFailed(ctx context.Context, which string) {
	m.recordFailures.Add(ctx, 1, metric.WithAttributes(attribute.String("record", which)))
}
