package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// Time budget: under 1 s for the recording tests (in-process, no
// network); about 2 s for TestAWorkerThatRecordsNothingLinksNoParquet,
// which runs go list.

var recordT0 = time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)

// deliver hands w one request with id's headers and retry count retries,
// as Cloud Tasks would, and returns the status and body of the answer.
func deliver(w http.Handler, h http.Header, retries int) (int, string) {
	h = h.Clone()
	h.Set(HeaderRetryCount, strconv.Itoa(retries))
	h.Set(HeaderExecutionCount, strconv.Itoa(retries))
	req := httptest.NewRequest(http.MethodPost, "/work", strings.NewReader("{}"))
	req.Header = h
	rec := httptest.NewRecorder()
	w.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// Every delivery that passes verification and the key check gets a
// started record, then its outcome with the status answered and the
// latency, under an ID of its own; rejected requests get none.
func TestEachDeliveryIsRecorded(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(recordT0)
	box := outbox.NewMemory(clock)
	cfg := insecure(NewMemoryInbox())
	cfg.Outbox, cfg.Clock = box, clock
	calls := map[string]int{}
	w, err := New(context.Background(), cfg, func(_ context.Context, d *Delivery) error {
		clock.Advance(3 * time.Millisecond) // the handler's work takes 3 ms
		calls[d.ID.TaskKey()]++
		if calls[d.ID.TaskKey()] > 1 {
			return nil
		}
		switch d.ID.TaskKey() {
		case "retryable":
			return errors.New("database is down")
		case "permanent":
			return Permanent(errors.New("order 7 does not exist"))
		case "panics":
			panic("nil map")
		case "slow":
			return SlowDown(errors.New("quota"), time.Second)
		}
		return nil
	})
	require.NoError(t, err)
	for _, key := range []string{"ok", "retryable", "permanent", "panics", "slow"} {
		h := cloudTasksHeaders(mustID(t, "rec", key, "1"))
		for retries := range 2 {
			deliver(w, h, retries)
			clock.Advance(time.Second)
		}
	}
	rejected := cloudTasksHeaders(mustID(t, "rec", "rejected", "1"))
	rejected.Set(HeaderCtdispatchTaskID, mustID(t, "rec", "other", "1").CloudTaskID())
	code, body := deliver(w, rejected, 0)
	require.Equal(t, [2]any{200, "rejected\n"}, [2]any{code, body})

	hist, err := box.Lookup(context.Background(), outbox.Query{RunID: "rec", History: true})
	require.NoError(t, err)
	var got []string
	for _, r := range hist {
		internal, _, ok := outbox.SplitDeliveryID(r.ID)
		require.True(t, ok, r.ID)
		got = append(got, fmt.Sprintf("%s r%d e%d %s %d %s +%s", internal, r.Delivery.RetryCount, r.Delivery.ExecutionCount,
			r.Status, r.Delivery.HTTPStatus, r.Delivery.Latency, r.UpdatedAt.Sub(recordT0)))
	}
	// Sorted by delivery ID: by task, then by arrival (the suffix is a
	// UUIDv7), each delivery's started record before its outcome.
	require.Equal(t, []string{
		"dispatch:rec:ok:1 r0 e0 started 0 0s +0s", "dispatch:rec:ok:1 r0 e0 done 200 3ms +3ms",
		"dispatch:rec:ok:1 r1 e1 started 0 0s +1.003s", "dispatch:rec:ok:1 r1 e1 duplicate 200 0s +1.003001s",
		"dispatch:rec:panics:1 r0 e0 started 0 0s +6.012s", "dispatch:rec:panics:1 r0 e0 panic 500 3ms +6.015s",
		"dispatch:rec:panics:1 r1 e1 started 0 0s +7.015s", "dispatch:rec:panics:1 r1 e1 done 200 3ms +7.018s",
		"dispatch:rec:permanent:1 r0 e0 started 0 0s +4.009s", "dispatch:rec:permanent:1 r0 e0 failed 200 3ms +4.012s",
		"dispatch:rec:permanent:1 r1 e1 started 0 0s +5.012s", "dispatch:rec:permanent:1 r1 e1 duplicate 200 0s +5.012001s",
		"dispatch:rec:retryable:1 r0 e0 started 0 0s +2.003s", "dispatch:rec:retryable:1 r0 e0 retry 500 3ms +2.006s",
		"dispatch:rec:retryable:1 r1 e1 started 0 0s +3.006s", "dispatch:rec:retryable:1 r1 e1 done 200 3ms +3.009s",
		"dispatch:rec:slow:1 r0 e0 started 0 0s +8.018s", "dispatch:rec:slow:1 r0 e0 slow_down 503 3ms +8.021s",
		"dispatch:rec:slow:1 r1 e1 started 0 0s +9.021s", "dispatch:rec:slow:1 r1 e1 done 200 3ms +9.024s",
	}, got, "a duplicate answered in no time is nudged 1µs past its started record")

	// One outcome record in full: what a reader of the table sees.
	id := mustID(t, "rec", "ok", "1")
	first := hist[1]
	require.Equal(t, outbox.Record{
		Table: outbox.TableDeliveries, ID: first.ID, CloudTaskID: id.CloudTaskID(), Queue: testQueueID, RunID: "rec",
		TaskKey: "ok", Attempt: "1", Kind: "dispatch", Status: outbox.StatusDone, ProcessorUUID: box.ProcessorUUID(),
		CreatedAt: recordT0, UpdatedAt: recordT0.Add(3 * time.Millisecond),
		Delivery: outbox.DeliveryFields{HTTPStatus: 200, Latency: 3 * time.Millisecond},
	}, first)
}

// Every outcome a recorded delivery can have is a status its table takes,
// with the HTTP status the worker answers.
func TestRecordedOutcomesAreValidRecords(t *testing.T) {
	t.Parallel()
	id := mustID(t, "r", "t", "1")
	for o, st := range recordedOutcomes {
		require.Equal(t, string(o), string(st))
		r := outbox.DeliveryRecordOf(id, "x")
		r.Status, r.Delivery.HTTPStatus = st, int32(o.Status())
		require.NoError(t, r.Prepare("p", recordT0), o)
	}
}

// brokenOutbox refuses every append at once (unavailable) or, when late
// is set, accepts it and reports the failure through done.
type brokenOutbox struct {
	outbox.Outbox
	late bool
}

var errDiskFull = errors.New("outbox: unavailable: no space left on device")

func (b brokenOutbox) Append(_ context.Context, _ outbox.Record, done func(error)) error {
	if b.late {
		done(errDiskFull)
		return nil
	}
	return errDiskFull
}

// When the delivery record cannot be written, the answer is the one the
// inbox and the handler decided: the effect is committed, and a 500 would
// only bring a redelivery that finds the key done. The failure is logged
// and counted instead.
func TestRecordFailureDoesNotChangeTheAnswer(t *testing.T) {
	t.Parallel()
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("late=%v", late), func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			reader := sdkmetric.NewManualReader()
			inbox := NewMemoryInbox()
			cfg := insecure(inbox)
			cfg.Outbox = brokenOutbox{Outbox: outbox.NewMemory(nil), late: late}
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			w, err := New(context.Background(), cfg, func(context.Context, *Delivery) error { return nil })
			require.NoError(t, err)
			id := mustID(t, "broken", "t", "1")
			code, body := deliver(w, cloudTasksHeaders(id), 0)
			require.Equal(t, [2]any{200, "done\n"}, [2]any{code, body})
			got, ok := inbox.Finished(id.String())
			require.True(t, ok)
			require.Equal(t, OutcomeDone, got)

			var rm metricdata.ResourceMetrics
			require.NoError(t, reader.Collect(context.Background(), &rm))
			failures := map[string]int64{}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name != MetricRecordFailures {
						continue
					}
					for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
						v, _ := p.Attributes.Value(attribute.Key("record"))
						failures[v.AsString()] = p.Value
					}
				}
			}
			require.Equal(t, map[string]int64{"started": 1, "outcome": 1}, failures)
			require.Equal(t, 2, strings.Count(logs.String(), `level=ERROR msg="worker: delivery record not written; the answer stands"`), logs.String())
			require.Contains(t, logs.String(), `record=outcome delivery_id=`+id.String()+"#")
			require.Contains(t, logs.String(), `status=done error="outbox: unavailable: no space left on device"`)
		})
	}
}

// The worker package takes the outbox seam, not the Parquet engine: a
// service that records nothing, or records into outbox.Memory, links no
// parquet-go. Only a program that imports outbox/parquetbox does.
// scripts/readme-go checks the same of the programs the docs show.
func TestAWorkerThatRecordsNothingLinksNoParquet(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the package's dependencies")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/ctdispatch/ctdispatch/outbox")
	for _, d := range deps {
		require.False(t, strings.HasPrefix(d, "github.com/parquet-go/") || strings.HasSuffix(d, "/outbox/parquetbox"),
			"the worker links %s", d)
	}
}
