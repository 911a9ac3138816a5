package pgbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// drainRounds is how many rounds BenchmarkRelayDrain runs of each kind;
// it reports their medians.
const drainRounds = 3

// BenchmarkRelayDrain measures how fast relays drain a backlog of b.N
// committed intents (DispatchTx, 100 per transaction, all committed
// before the clock starts) against the in-repo emulator over gRPC and a
// local PostgreSQL, beside the rate at which bare CreateTask calls create
// as many tasks:
//
//   - create-bare-C: C callers (C = cloudtasks.DefaultRelayConcurrency,
//     16) each making CreateTask calls until b.N tasks exist;
//   - create-bare-3C: the same with 3·C callers;
//   - relays-1: one dispatcher's relay at RelayConcurrency C, its passes
//     (Dispatcher.Relay: claim 64, create and record them C at a time,
//     and again while claims come full) until the backlog is gone;
//   - relays-3: three dispatchers (each its own pool and processor) at
//     RelayConcurrency C each, at once.
//
// Each kind runs drainRounds times, the order rotating each round, and
// reports its median tasks/s and the relays' ratios to create-bare-C and
// create-bare-3C (the same concurrency per relay, and in all). The
// sub-benchmarks add no delay (latency=0) or 10ms to every emulator call
// (latency=10ms, nearer the real service). Run it alone:
//
//	go test -run '^$' -bench RelayDrain -benchtime 3000x ./outbox/pgbox/
func BenchmarkRelayDrain(b *testing.B) {
	for _, latency := range []time.Duration{0, 10 * time.Millisecond} {
		b.Run(fmt.Sprintf("latency=%s", latency), func(b *testing.B) {
			w := newTxWorld(b, clockwork.NewRealClock())
			if latency > 0 {
				require.NoError(b, w.emu.SetFaults(emulator.Faults{Rules: []emulator.FaultRule{{Rate: 1, Latency: latency}}}))
			}
			writer, _ := w.dispatcher(b, cloudtasks.Config{NoRelay: true})
			cl, err := w.emu.NewClient(context.Background())
			require.NoError(b, err)
			defer cl.Close()
			const c = cloudtasks.DefaultRelayConcurrency
			kinds := []string{"create-bare-C", "create-bare-3C", "relays-1", "relays-3"}
			rates := map[string][]float64{}
			b.ResetTimer()
			b.StopTimer()
			for round := range drainRounds {
				order := slices.Concat(kinds[round%len(kinds):], kinds[:round%len(kinds)])
				for _, k := range order {
					tag := fmt.Sprintf("%s-r%d", k, round)
					var took time.Duration
					switch k {
					case "create-bare-C":
						took = createBare(b, cl, tag, c)
					case "create-bare-3C":
						took = createBare(b, cl, tag, 3*c)
					case "relays-1":
						took = drainBacklog(b, w, writer, tag, 1, c)
					case "relays-3":
						took = drainBacklog(b, w, writer, tag, 3, c)
					}
					rates[k] = append(rates[k], float64(b.N)/took.Seconds())
				}
			}
			med := map[string]float64{}
			for _, k := range kinds {
				slices.Sort(rates[k])
				med[k] = rates[k][len(rates[k])/2]
				b.ReportMetric(med[k], k+"-tasks/s")
			}
			for _, k := range []string{"relays-1", "relays-3"} {
				b.ReportMetric(med[k]/med["create-bare-C"], k+"/bare-C")
				b.ReportMetric(med[k]/med["create-bare-3C"], k+"/bare-3C")
			}
			reportLoad(b)
		})
	}
}

// createBare creates b.N tasks named after tag in txQueue with callers
// concurrent CreateTask calls, and returns how long that took.
func createBare(b *testing.B, cl cloudtasks.Client, tag string, callers int) time.Duration {
	ctx := context.Background()
	var next atomic.Int64
	var g errgroup.Group
	b.StartTimer()
	start := time.Now()
	for range callers {
		g.Go(func() error {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return nil
				}
				id, err := naming.NewDispatch(tag, "t", naming.Attempt(uint64(i)))
				if err != nil {
					return err
				}
				if _, err := cl.CreateTask(ctx, &cloudtaskspb.CreateTaskRequest{Parent: txQueue, Task: &cloudtaskspb.Task{
					Name: id.TaskName(txQueue),
					MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
						Url: "https://worker.example/run", Body: []byte(tag)}}}}); err != nil {
					return err
				}
			}
		})
	}
	require.NoError(b, g.Wait())
	took := time.Since(start)
	b.StopTimer()
	return took
}

// drainBacklog commits b.N intents named after tag with writer's
// DispatchTx, then has relays dispatchers, each its own pool and
// processor at RelayConcurrency concurrency, run relay passes at once
// until the intents are gone, and returns how long the passes took
// (opening the dispatchers and committing the backlog are not counted).
// Every intent is created exactly once.
func drainBacklog(b *testing.B, w *txWorld, writer *cloudtasks.Dispatcher, tag string, relays, concurrency int) time.Duration {
	ctx := context.Background()
	const perTx = 100
	for i := 0; i < b.N; i += perTx {
		tx, err := w.db.BeginTx(ctx, nil)
		require.NoError(b, err)
		for j := i; j < min(i+perTx, b.N); j++ {
			key := fmt.Sprintf("%s-%d", tag, j)
			_, err := writer.DispatchTx(ctx, pgbox.SQLTx(tx), txRequest(key, key))
			require.NoError(b, err)
		}
		require.NoError(b, tx.Commit())
	}
	ds := make([]*cloudtasks.Dispatcher, relays)
	dbs := make([]*sql.DB, relays)
	for i := range ds {
		ds[i], dbs[i] = w.drainer(b, concurrency)
	}
	var created atomic.Int64
	var g errgroup.Group
	b.StartTimer()
	start := time.Now()
	for _, d := range ds {
		g.Go(func() error {
			st, err := d.Relay(ctx)
			if st.Errors > 0 {
				return fmt.Errorf("relay pass: %+v", st)
			}
			created.Add(int64(st.Created))
			return err
		})
	}
	require.NoError(b, g.Wait())
	took := time.Since(start)
	b.StopTimer()
	require.Equal(b, int64(b.N), created.Load(), "every intent created once")
	for i, d := range ds {
		require.NoError(b, d.Close(ctx))
		require.NoError(b, dbs[i].Close()) // so the rounds' pools do not add up past the server's max_connections
	}
	return took
}

// drainer returns a dispatcher over a pool and outbox of its own whose
// relay runs only when called (Dispatcher.Relay), concurrency creates at
// a time, and its pool. The caller closes both.
func (w *txWorld) drainer(b *testing.B, concurrency int) (*cloudtasks.Dispatcher, *sql.DB) {
	db, err := sql.Open("pgx", w.dsn)
	require.NoError(b, err)
	db.SetMaxIdleConns(concurrency + 2)
	box, err := pgbox.New(db, w.opts)
	require.NoError(b, err)
	cl, err := w.emu.NewClient(context.Background())
	require.NoError(b, err)
	b.Cleanup(func() { cl.Close() })
	d, err := cloudtasks.NewDispatcher(context.Background(), box, &cloudtasks.Config{Project: "p", Location: "l", Queue: "q",
		Client: cl, Clock: w.clock, NoRelay: true, RelayConcurrency: concurrency})
	require.NoError(b, err)
	return d, db
}
