package pgbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/googleapis/gax-go/v2"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// txQueue is the queue of the tests' dispatches; txRemoteQueue and
// txPollQueue, ones only a benchmark's remote relays take.
const (
	txQueue       = "projects/p/locations/l/queues/q"
	txRemoteQueue = "projects/p/locations/l/queues/remote"
	txPollQueue   = "projects/p/locations/l/queues/remote-poll"
)

// The transactional path's behaviours are tested in package cloudtasks
// over outbox.Memory, and the store's part of them against this package
// by the conformance suite (outboxtest.RunIntents in TestConformance).
// What stays here is PostgreSQL's own: relays of several processes on
// their own pools, and a Dispatch waiting for an open transaction's lock.

// txWorld is an emulator and a migrated schema of one database, for
// dispatchers that record inside transactions.
type txWorld struct {
	emu   *emulator.Server
	db    *sql.DB
	dsn   string
	opts  pgbox.Config
	clock clockwork.Clock
	calls atomic.Int64 // CreateTask calls that reached the emulator
	gate  *gate        // when set, holds every CreateTask until opened
	// wrap, when set, is the outbox the next dispatchers get instead of
	// their own pgbox outbox.
	wrap func(*pgbox.Outbox) outbox.Outbox
}

func newTxWorld(t testing.TB, clock clockwork.Clock) *txWorld {
	t.Helper()
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock, Queues: []emulator.QueueConfig{{Name: txQueue}, {Name: txRemoteQueue}, {Name: txPollQueue}}})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	w := &txWorld{emu: emu, dsn: pgtest.New(t), clock: clock,
		opts: pgbox.Config{Schema: fmt.Sprintf("s%d", schemas.Add(1)), Clock: clock}}
	w.db = w.open(t)
	require.NoError(t, pgbox.Migrate(t.Context(), w.db, w.opts))
	return w
}

// open returns a pool of its own, as another process would have.
func (w *txWorld) open(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", w.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// countingClient counts the CreateTask calls of a dispatcher, and holds
// each at the world's gate when it has one.
type countingClient struct {
	cloudtasks.Client
	n    *atomic.Int64
	gate *gate
}

func (c countingClient) CreateTask(ctx context.Context, req *cloudtaskspb.CreateTaskRequest, opts ...gax.CallOption) (*cloudtaskspb.Task, error) {
	if c.gate != nil {
		if err := c.gate.pass(ctx, req.GetTask().GetName()); err != nil {
			return nil, err
		}
	}
	c.n.Add(1)
	return c.Client.CreateTask(ctx, req, opts...)
}

// gate holds the CreateTask calls that arrive at it until it is opened,
// telling the test of each arrival: calls a test can keep in flight.
type gate struct {
	arrived chan string // the task names of the calls held
	opened  chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{arrived: make(chan string, 1000), opened: make(chan struct{})} }

func (g *gate) pass(ctx context.Context, name string) error {
	g.arrived <- name
	select {
	case <-g.opened:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) open() { g.once.Do(func() { close(g.opened) }) }

// await returns the names of the next n calls to arrive.
func (g *gate) await(t testing.TB, n int) []string {
	t.Helper()
	var names []string
	for range n {
		select {
		case name := <-g.arrived:
			names = append(names, name)
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d CreateTask calls arrived within a minute", len(names), n)
		}
	}
	return names
}

// dispatcher returns a dispatcher over its own pool and outbox (its own
// processor), configured by cfg's relay fields, on cfg.Clock when set and
// on the world's clock otherwise.
func (w *txWorld) dispatcher(t testing.TB, cfg cloudtasks.Config) (*cloudtasks.Dispatcher, *pgbox.Outbox) {
	t.Helper()
	box, err := pgbox.New(w.open(t), w.opts)
	require.NoError(t, err)
	cl, err := w.emu.NewClient(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	cfg.Project, cfg.Location, cfg.Queue = "p", "l", "q"
	if cfg.Clock == nil {
		cfg.Clock = w.clock
	}
	cfg.Client = countingClient{Client: cl, n: &w.calls, gate: w.gate}
	var ob outbox.Outbox = box
	if w.wrap != nil {
		ob = w.wrap(box)
	}
	d, err := cloudtasks.NewDispatcher(t.Context(), ob, &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
	return d, box
}

func txRequest(key, body string) cloudtasks.DispatchRequest {
	return cloudtasks.DispatchRequest{RunID: "tx", TaskKey: key, Identity: naming.Attempt(1),
		Task: cloudtasks.Task{URL: "https://worker.example/run", Body: []byte(body)}}
}

// inTx runs fn in a transaction of db and commits it, or rolls it back
// when commit is false.
func inTx(t *testing.T, db *sql.DB, commit bool, fn func(tx outbox.Tx)) {
	t.Helper()
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	fn(pgbox.SQLTx(tx))
	if commit {
		require.NoError(t, tx.Commit())
	} else {
		require.NoError(t, tx.Rollback())
	}
}

// Two dispatchers on one database, each with its own pool, processor and
// running relay, race over 100 committed intents while a caller waits for
// every outcome: each task is created by exactly one CreateTask call, and
// each ID's history is pending then created, once. About 3 s (11 s under
// the race detector on a shared 2-core machine).
func TestDispatchTxCommittedCreatedOnceByRacingRelays(t *testing.T) {
	t.Parallel()
	const n = 100
	w := newTxWorld(t, clockwork.NewRealClock())
	cfg := cloudtasks.Config{RelayInterval: 5 * time.Millisecond}
	d0, box := w.dispatcher(t, cfg)
	d1, _ := w.dispatcher(t, cfg)

	for i := range n {
		inTx(t, w.db, true, func(tx outbox.Tx) {
			res, err := d0.DispatchTx(t.Context(), tx, txRequest(fmt.Sprintf("t%03d", i), fmt.Sprint(i)))
			require.NoError(t, err)
			require.Equal(t, cloudtasks.OutcomeQueued, res.Outcome)
		})
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waiter := []*cloudtasks.Dispatcher{d0, d1}[i%2]
			rec, err := waiter.WaitOutcome(t.Context(), fmt.Sprintf("dispatch:tx:t%03d:1", i))
			if err != nil {
				t.Error(err)
				return
			}
			if rec.Status != outbox.StatusCreated {
				t.Errorf("%s: status %s, want created", rec.ID, rec.Status)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, n, w.emu.TaskCount())
	require.Equal(t, int64(n), w.calls.Load(), "one CreateTask call per task")
	hist, err := box.Lookup(t.Context(), outbox.Query{RunID: "tx", History: true})
	require.NoError(t, err)
	require.Len(t, hist, 2*n)
	for i := 0; i < len(hist); i += 2 {
		require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusCreated}, []outbox.Status{hist[i].Status, hist[i+1].Status}, hist[i].ID)
		require.Equal(t, hist[i].ID, hist[i+1].ID)
	}
}

// A Dispatch of an ID that an open transaction has recorded waits for
// that transaction on the version's unique index; once it commits, the
// Dispatch re-reads, creates the task as a repeat of the pending record
// would, and the relay drops the intent without a call: one task, one
// CreateTask call. About 2 s.
func TestDispatchWaitsForAnOpenDispatchTx(t *testing.T) {
	t.Parallel()
	w := newTxWorld(t, clockwork.NewRealClock())
	a, box := w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	b, _ := w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	tx, err := w.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	_, err = a.DispatchTx(t.Context(), pgbox.SQLTx(tx), txRequest("open", "body"))
	require.NoError(t, err)

	answered := make(chan cloudtasks.DispatchResult, 1)
	go func() {
		res, err := b.Dispatch(context.Background(), txRequest("open", "body"))
		if err != nil {
			t.Error(err)
		}
		answered <- res
	}()
	require.Eventually(t, func() bool { // B's insert waits for A's transaction
		var waiting int
		err := w.db.QueryRowContext(t.Context(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting > 0
	}, 30*time.Second, 10*time.Millisecond)
	select {
	case res := <-answered:
		t.Fatalf("B answered %s before A's transaction ended", res.Outcome)
	default:
	}
	require.NoError(t, tx.Commit())
	res := <-answered
	require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)

	st, err := a.Relay(t.Context())
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{Claimed: 1, Moved: 1}, st)
	require.Equal(t, int64(1), w.calls.Load())
	hist, err := box.Lookup(t.Context(), outbox.Query{ID: "dispatch:tx:open:1", History: true})
	require.NoError(t, err)
	got := make([]string, len(hist))
	for i, r := range hist {
		got[i] = fmt.Sprintf("v%d %s", r.Version, r.Status)
	}
	require.Equal(t, []string{"v1 pending", "v2 pending", "v3 created"}, got)
}

// An intent replaced while a relay holds the claim on it (here a cancel
// committed over a dispatch being created) stays claimed, so no other
// relay runs the cancel beside the create; the first relay's DropIntent
// finds it replaced and releases it, and the next claim returns the
// cancel. About 1 s.
func TestReplacedIntentWaitsForItsClaim(t *testing.T) {
	t.Parallel()
	w := newTxWorld(t, clockwork.NewRealClock())
	d, first := w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	_, second := w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	ctx := t.Context()
	inTx(t, w.db, true, func(tx outbox.Tx) {
		_, err := d.DispatchTx(ctx, tx, txRequest("raced", "body"))
		require.NoError(t, err)
	})
	claimed, err := first.ClaimIntents(ctx, []string{txQueue}, 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.False(t, claimed[0].Delete)

	inTx(t, w.db, true, func(tx outbox.Tx) {
		_, err := d.CancelTx(ctx, tx, "dispatch:tx:raced:1", "")
		require.NoError(t, err)
	})
	none, err := second.ClaimIntents(ctx, []string{txQueue}, 10, time.Hour)
	require.NoError(t, err)
	require.Empty(t, none, "the cancel waits for the claimed create")
	has, err := second.HasIntent(ctx, "dispatch:tx:raced:1")
	require.NoError(t, err)
	require.True(t, has)

	require.NoError(t, first.DropIntent(ctx, claimed[0]))
	next, err := second.ClaimIntents(ctx, []string{txQueue}, 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, next, 1)
	require.Equal(t, outbox.Intent{Delete: true, Table: outbox.TableDispatch, ID: "dispatch:tx:raced:1", Version: 1, Queue: txQueue,
		Request: []byte{}, CreatedAt: next[0].CreatedAt}, next[0])
	require.NoError(t, second.DropIntent(ctx, next[0]))
	has, err = second.HasIntent(ctx, "dispatch:tx:raced:1")
	require.NoError(t, err)
	require.False(t, has)
}

// The relay creates tasks under its caller's span, which is not one of the
// dispatcher's operations: each CreateTask call is a client span, a child
// of that span, never an event the dispatcher adds to it.
func TestRelayCallsAreSpansUnderTheCaller(t *testing.T) {
	t.Parallel()
	w := newTxWorld(t, clockwork.NewRealClock())
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	d, _ := w.dispatcher(t, cloudtasks.Config{NoRelay: true, TracerProvider: tp, Propagator: propagation.TraceContext{}})
	inTx(t, w.db, true, func(tx outbox.Tx) {
		_, err := d.DispatchTx(t.Context(), tx, txRequest("traced", "b"))
		require.NoError(t, err)
	})
	ctx, loop := tp.Tracer("program").Start(t.Context(), "relay loop")
	st, err := d.Relay(ctx)
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{Claimed: 1, Created: 1}, st)
	loop.End()

	var calls []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "google.cloud.tasks.v2.CloudTasks/CreateTask":
			calls = append(calls, s)
		case "relay loop":
			require.Empty(t, s.Events(), "the caller's span gets no event of the dispatcher's")
		}
	}
	require.Len(t, calls, 1)
	require.Equal(t, loop.SpanContext().SpanID(), calls[0].Parent().SpanID())
	require.Equal(t, trace.SpanKindClient, calls[0].SpanKind())
	attrs := map[attribute.Key]string{}
	for _, kv := range calls[0].Attributes() {
		attrs[kv.Key] = kv.Value.String()
	}
	require.Equal(t, "1", attrs["ctdispatch.attempt"])
	require.Equal(t, "OK", attrs["rpc.response.status_code"])
}
