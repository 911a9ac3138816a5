package pgbox_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// BenchmarkDispatchTxLatency measures, interleaved in one loop against the
// in-repo emulator over gRPC and a local PostgreSQL, the latency of
//
//   - create-bare: one CreateTask call, the baseline;
//   - dispatch: a Dispatch through the PostgreSQL outbox (strict mode, so
//     the outcome has committed when it returns);
//   - tx-local: from the commit of a transaction that called DispatchTx to
//     WaitOutcome's created, with the relay in the same process (which
//     WaitOutcome wakes);
//   - tx-remote: the same, with the relay in another dispatcher (its own
//     pool and processor), which finds the intent by polling every
//     DefaultRelayInterval.
//
// and reports each one's p50 and p99 in milliseconds and as ratios to
// create-bare's. Run it alone on an idle machine:
//
//	go test -run '^$' -bench DispatchTxLatency -benchtime 300x ./outbox/pgbox/
func BenchmarkDispatchTxLatency(b *testing.B) {
	w := newTxWorld(b, clockwork.NewRealClock())
	ctx := context.Background()
	local, _ := w.dispatcher(b, cloudtasks.Config{Durability: cloudtasks.DurabilityStrict})
	waiter, _ := w.dispatcher(b, cloudtasks.Config{NoRelay: true, RelayInterval: 5 * time.Millisecond})
	w.dispatcher(b, cloudtasks.Config{RelayQueues: []string{"remote"}}) // polls at the default interval
	cl, err := w.emu.NewClient(ctx)
	require.NoError(b, err)
	defer cl.Close()

	kinds := []string{"create-bare", "dispatch", "tx-local", "tx-remote"}
	lat := make(map[string][]time.Duration, len(kinds))
	txDispatch := func(d *cloudtasks.Dispatcher, key string) time.Duration {
		tx, err := w.db.BeginTx(ctx, nil)
		require.NoError(b, err)
		res, err := local.DispatchTx(ctx, pgbox.SQLTx(tx), txRequest(key, key))
		require.NoError(b, err)
		require.NoError(b, tx.Commit())
		start := time.Now()
		rec, err := d.WaitOutcome(ctx, res.ID)
		elapsed := time.Since(start)
		require.NoError(b, err)
		require.Equal(b, outbox.StatusCreated, rec.Status)
		return elapsed
	}
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		_, err := cl.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: txQueue, Task: &cloudtaskspb.Task{
			Name: fmt.Sprintf("%s/tasks/bare-%d", txQueue, i),
			MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
				Url: "https://worker.example/run", Body: []byte("bare")}}}})
		lat["create-bare"] = append(lat["create-bare"], time.Since(start))
		require.NoError(b, err)

		start = time.Now()
		_, err = local.Dispatch(ctx, txRequest(fmt.Sprintf("d%d", i), "d"))
		lat["dispatch"] = append(lat["dispatch"], time.Since(start))
		require.NoError(b, err)

		lat["tx-local"] = append(lat["tx-local"], txDispatch(local, fmt.Sprintf("l%d", i)))
		lat["tx-remote"] = append(lat["tx-remote"], txDispatchRemote(b, w, local, waiter, fmt.Sprintf("r%d", i)))
	}
	b.StopTimer()
	base := map[string]time.Duration{}
	for _, k := range kinds {
		slices.Sort(lat[k])
		for _, q := range []struct {
			name string
			at   float64
		}{{"p50", 0.50}, {"p99", 0.99}} {
			v := lat[k][int(q.at*float64(len(lat[k])-1))]
			b.ReportMetric(float64(v.Microseconds())/1000, k+"-"+q.name+"-ms")
			if k == "create-bare" {
				base[q.name] = v
			} else {
				b.ReportMetric(float64(v)/float64(base[q.name]), k+"-"+q.name+"-x")
			}
		}
	}
}

// txDispatchRemote records a dispatch with d's DispatchTx and measures
// from commit to waiter's WaitOutcome, while neither d nor waiter relays:
// the third dispatcher of the world does.
func txDispatchRemote(b *testing.B, w *txWorld, d, waiter *cloudtasks.Dispatcher, key string) time.Duration {
	ctx := context.Background()
	req := txRequest(key, key)
	req.Task.Queue = "remote"
	tx, err := w.db.BeginTx(ctx, nil)
	require.NoError(b, err)
	res, err := d.DispatchTx(ctx, pgbox.SQLTx(tx), req)
	require.NoError(b, err)
	require.NoError(b, tx.Commit())
	start := time.Now()
	rec, err := waiter.WaitOutcome(ctx, res.ID)
	elapsed := time.Since(start)
	require.NoError(b, err)
	require.Equal(b, outbox.StatusCreated, rec.Status)
	return elapsed
}
