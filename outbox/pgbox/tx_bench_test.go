package pgbox_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

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
//     pool, processor and listener), woken by the commit's notification,
//     and WaitOutcome in a third, woken by the relay's;
//   - tx-remote-poll: the same without listeners, as before them: the
//     relay finds the intent by polling every DefaultRelayInterval, and
//     WaitOutcome polls every 5ms.
//
// and reports each one's p50 and p99 in milliseconds and as ratios to
// create-bare's, and the machine's one-minute load average when it ends
// (load1, from /proc/loadavg). Run it alone on an idle machine:
//
//	go test -run '^$' -bench DispatchTxLatency -benchtime 300x ./outbox/pgbox/
func BenchmarkDispatchTxLatency(b *testing.B) {
	w := newTxWorld(b, clockwork.NewRealClock())
	ctx := context.Background()
	local, _ := w.dispatcher(b, cloudtasks.Config{Durability: cloudtasks.DurabilityStrict})
	waiter, _ := w.dispatcher(b, cloudtasks.Config{NoRelay: true, Listener: w.listener(b)})
	pollWaiter, _ := w.dispatcher(b, cloudtasks.Config{NoRelay: true, RelayInterval: 5 * time.Millisecond})
	w.dispatcher(b, cloudtasks.Config{RelayQueues: []string{"remote"}, Listener: w.listener(b)})
	w.dispatcher(b, cloudtasks.Config{RelayQueues: []string{"remote-poll"}}) // polls at the default interval
	cl, err := w.emu.NewClient(ctx)
	require.NoError(b, err)
	defer cl.Close()

	kinds := []string{"create-bare", "dispatch", "tx-local", "tx-remote", "tx-remote-poll"}
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
		lat["tx-remote"] = append(lat["tx-remote"], txDispatchRemote(b, w, local, waiter, "remote", fmt.Sprintf("r%d", i)))
		lat["tx-remote-poll"] = append(lat["tx-remote-poll"], txDispatchRemote(b, w, local, pollWaiter, "remote-poll", fmt.Sprintf("p%d", i)))
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
	reportLoad(b)
}

// reportLoad reports the one-minute load average as load1, where
// /proc/loadavg says it: the machines these run on are shared.
func reportLoad(b *testing.B) {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	if load, err := strconv.ParseFloat(strings.Fields(string(raw))[0], 64); err == nil {
		b.ReportMetric(load, "load1")
	}
}

// txDispatchRemote records a dispatch to queue with d's DispatchTx and
// measures from commit to waiter's WaitOutcome, while neither d nor
// waiter relays: the world's dispatcher of queue does.
func txDispatchRemote(b *testing.B, w *txWorld, d, waiter *cloudtasks.Dispatcher, queue, key string) time.Duration {
	ctx := context.Background()
	req := txRequest(key, key)
	req.Task.Queue = queue
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

// BenchmarkDispatchTxCommits measures how many transactions that each
// record one DispatchTx commit per second, 64 callers at once: with the
// notification that wakes listening relays at most once per
// DefaultNotifyGap (notify, the default), in every transaction
// (notify-each: NotifyGap < 0), and without any (no-notify: NoNotify).
// PostgreSQL commits the transactions that notified one at a time, under
// a lock of the whole cluster; this is what that costs. No relay runs:
// the intents stay. Reports commits/s and the load average (load1). Run
// the binary several times for interleaved samples:
//
//	go test -c -o /tmp/pgbox.test ./outbox/pgbox/
//	for i in 1 2 3 4 5 6; do (cd outbox/pgbox && /tmp/pgbox.test -test.run '^$' -test.bench DispatchTxCommits -test.benchtime 3000x); done
func BenchmarkDispatchTxCommits(b *testing.B) {
	for _, c := range []struct {
		name string
		opts pgbox.Config
	}{{"notify", pgbox.Config{}}, {"notify-each", pgbox.Config{NotifyGap: -1}}, {"no-notify", pgbox.Config{NoNotify: true}}} {
		b.Run(c.name, func(b *testing.B) {
			w := newTxWorld(b, clockwork.NewRealClock())
			w.opts.NoNotify, w.opts.NotifyGap = c.opts.NoNotify, c.opts.NotifyGap
			d, _ := w.dispatcher(b, cloudtasks.Config{NoRelay: true})
			const callers = 64
			w.db.SetMaxIdleConns(callers)
			ctx := context.Background()
			var next atomic.Int64
			b.ResetTimer()
			start := time.Now()
			var g errgroup.Group
			for range callers {
				g.Go(func() error {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return nil
						}
						tx, err := w.db.BeginTx(ctx, nil)
						if err != nil {
							return err
						}
						key := fmt.Sprintf("c%d", i)
						if _, err := d.DispatchTx(ctx, pgbox.SQLTx(tx), txRequest(key, key)); err != nil {
							tx.Rollback()
							return err
						}
						if err := tx.Commit(); err != nil {
							return err
						}
					}
				})
			}
			require.NoError(b, g.Wait())
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "commits/s")
			reportLoad(b)
		})
	}
}

// BenchmarkDispatchManyTxCommits measures how many transactions that
// each record a batch of 100 dispatches commit per second, one caller at
// a time: with one DispatchManyTx call (many: two statements for the
// batch) and with 100 DispatchTx calls (each: three statements per
// dispatch), each in the default notify mode. No relay runs: the intents
// stay. Reports commits/s, dispatches/s and the load average (load1).
// Run the binary several times for interleaved samples:
//
//	go test -c -o /tmp/pgbox.test ./outbox/pgbox/
//	for i in 1 2 3; do (cd outbox/pgbox && /tmp/pgbox.test -test.run '^$' -test.bench DispatchManyTxCommits -test.benchtime 100x); done
func BenchmarkDispatchManyTxCommits(b *testing.B) {
	const batch = 100
	for _, c := range []struct {
		name string
		many bool
	}{{"many", true}, {"each", false}} {
		b.Run(c.name, func(b *testing.B) {
			w := newTxWorld(b, clockwork.NewRealClock())
			d, _ := w.dispatcher(b, cloudtasks.Config{NoRelay: true})
			ctx := context.Background()
			reqs := make([]cloudtasks.DispatchRequest, batch)
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				for j := range reqs {
					key := fmt.Sprintf("c%d-%d", i, j)
					reqs[j] = txRequest(key, key)
				}
				tx, err := w.db.BeginTx(ctx, nil)
				require.NoError(b, err)
				if c.many {
					_, err = d.DispatchManyTx(ctx, pgbox.SQLTx(tx), reqs)
				} else {
					for _, req := range reqs {
						if _, err = d.DispatchTx(ctx, pgbox.SQLTx(tx), req); err != nil {
							break
						}
					}
				}
				if err != nil {
					tx.Rollback()
					b.Fatal(err)
				}
				require.NoError(b, tx.Commit())
			}
			elapsed := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N)/elapsed, "commits/s")
			b.ReportMetric(float64(b.N*batch)/elapsed, "dispatches/s")
			reportLoad(b)
		})
	}
}
