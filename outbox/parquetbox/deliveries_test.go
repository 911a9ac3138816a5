package parquetbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Time budget: under 1 s.

// deliveryRecs returns the started and the outcome record of one delivery
// of id, arriving at the clock's now and answered 5 ms later.
func deliveryRecs(id naming.ID, suffix string, retries int32, st outbox.Status, code int32, arrived time.Time) (outbox.Record, outbox.Record) {
	s := outbox.DeliveryRecordOf(id, suffix)
	s.Queue, s.Status, s.CreatedAt, s.UpdatedAt = "q", outbox.StatusStarted, arrived, arrived
	s.Delivery = outbox.DeliveryFields{RetryCount: retries, ExecutionCount: retries}
	o := s
	o.Status, o.UpdatedAt = st, arrived.Add(5*time.Millisecond)
	o.Delivery.HTTPStatus, o.Delivery.Latency = code, 5*time.Millisecond
	return s, o
}

// Compaction folds each delivery to its outcome and never two deliveries
// of one task into one row; a delivery whose worker died stays started,
// and retention drops it like any other delivery.
func TestCompactKeepsEachDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	a, bb := b.open(t, procA), b.open(t, procB)
	id, err := naming.NewDispatch("r1", "extract", "1")
	require.NoError(t, err)
	for i, d := range []struct {
		box    *Outbox
		suffix string
		st     outbox.Status
		code   int32
	}{{a, "01", outbox.StatusRetry, 500}, {bb, "02", outbox.StatusBusy, 500}, {a, "03", outbox.StatusDone, 200}, {bb, "04", outbox.StatusDuplicate, 200}} {
		started, outcome := deliveryRecs(id, d.suffix, int32(i), d.st, d.code, t0.Add(time.Duration(i)*time.Second))
		require.NoError(t, outbox.AppendAndWait(ctx, d.box, started))
		require.NoError(t, outbox.AppendAndWait(ctx, d.box, outcome))
	}
	killed, _ := deliveryRecs(id, "05", 4, "", 0, t0.Add(4*time.Second))
	require.NoError(t, outbox.AppendAndWait(ctx, a, killed))
	require.NoError(t, a.Flush(ctx))
	require.NoError(t, bb.Flush(ctx))

	st, err := a.Compact(ctx, CompactOptions{Tables: []outbox.Table{outbox.TableDeliveries}})
	require.NoError(t, err)
	require.Equal(t, [2]int64{9, 5}, [2]int64{st.Tables[0].RowsIn, st.Tables[0].RowsOut})
	got, err := a.Lookup(ctx, outbox.Query{Table: outbox.TableDeliveries, CloudTaskID: id.CloudTaskID(), History: true})
	require.NoError(t, err)
	var rows []string
	for _, r := range got {
		rows = append(rows, fmt.Sprintf("%s %s r%d e%d %d %s %s", r.ID, r.Status, r.Delivery.RetryCount, r.Delivery.ExecutionCount,
			r.Delivery.HTTPStatus, r.Delivery.Latency, r.ProcessorUUID[len(r.ProcessorUUID)-1:]))
	}
	require.Equal(t, []string{
		"dispatch:r1:extract:1#01 retry r0 e0 500 5ms a",
		"dispatch:r1:extract:1#02 busy r1 e1 500 5ms b",
		"dispatch:r1:extract:1#03 done r2 e2 200 5ms a",
		"dispatch:r1:extract:1#04 duplicate r3 e3 200 5ms b",
		"dispatch:r1:extract:1#05 started r4 e4 0 0s a",
	}, rows)

	b.clock.Advance(time.Hour)
	st, err = a.Compact(ctx, CompactOptions{Tables: []outbox.Table{outbox.TableDeliveries}, Retention: Retention{"*": time.Minute}})
	require.NoError(t, err)
	require.Equal(t, int64(5), st.Tables[0].Dropped, "every delivery is past retention, the started one too")
}
