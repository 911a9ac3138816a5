package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/jonboulle/clockwork"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/cloudtasks/worker"
	"github.com/ctdispatch/ctdispatch/internal/durability"
	"github.com/ctdispatch/ctdispatch/internal/pause"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// The roles of the e2e scenario's child processes.
const (
	roleOrchestrator = "orchestrator"
	roleRecover      = "recover"
	roleWorker       = "worker"
)

// The stores the e2e scenario runs its orchestrators on.
const (
	storeParquet  = "parquet"
	storePostgres = "postgres"
)

// e2eEffectsTable is where the workers apply their effect: one row per
// handled delivery, with no constraint, so a doubled effect shows.
const e2eEffectsTable = "e2e_effects"

// e2eWorkerPrefix is the table prefix of the workers' deliveries table.
const e2eWorkerPrefix = "worker_"

// E2EChildEnv carries an e2e child's configuration (JSON) from the
// scenario to the hidden `ctdispatch chaos e2e-child` command.
const E2EChildEnv = "CTDISPATCH_E2E_CHILD"

// e2eChild configures one child process of the e2e scenario.
type e2eChild struct {
	Role string `json:"role"`
	Name string `json:"name"`
	// Store, Root and DSN name the orchestrators' outbox; DSN is also the
	// workers' database.
	Store string `json:"store"`
	Root  string `json:"root,omitempty"`
	DSN   string `json:"dsn"`
	// Emulator is the emulator's gRPC address; Queue the default queue.
	Emulator string `json:"emulator"`
	Queue    string `json:"queue"`
	// Seed and Items draw the plan (e2ePlan); Order shuffles it per
	// process.
	Seed  uint64 `json:"seed"`
	Items int    `json:"items"`
	Order uint64 `json:"order"`
	// Run, URL, Account and Base build the requests (e2eRequests).
	Run     string    `json:"run"`
	URL     string    `json:"url"`
	Account string    `json:"account"`
	Base    time.Time `json:"base"`
	// ClockOffset shifts the process's clock.
	ClockOffset time.Duration `json:"clock_offset"`
	// StaleAfter is the dispatcher's Config.StaleAfter.
	StaleAfter time.Duration `json:"stale_after"`
	// Issuer and KeysAddr let a worker verify the emulator's tokens.
	Issuer   string `json:"issuer,omitempty"`
	KeysAddr string `json:"keys_addr,omitempty"`
	// PauseAt lists, in increasing order, the deliveries (counted in the
	// process) at which a worker reaches PausePoint, which its
	// environment arms as many times.
	PauseAt    []int64 `json:"pause_at,omitempty"`
	PausePoint string  `json:"pause_point,omitempty"`
	// BypassOnce makes a worker apply its first effect outside the inbox
	// and fail the delivery: a planted fault the checker must catch.
	BypassOnce bool `json:"bypass_once,omitempty"`
}

// e2eEvent is one line of the e2e history: a call or an answer at one hop.
type e2eEvent struct {
	Seq     int    `json:"seq"`
	Proc    string `json:"proc"`
	Hop     string `json:"hop"`
	Op      string `json:"op"`
	Phase   string `json:"phase,omitempty"`
	ID      string `json:"id,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Err     string `json:"err,omitempty"`
	Status  int    `json:"status,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// Processor is a worker's processor UUID, in its deliveries records.
	Processor string `json:"processor,omitempty"`
}

// The hops of the history.
const (
	hopOrchestrator = "orchestrator"
	hopEmulator     = "emulator"
	hopWorker       = "worker"
	hopPostgres     = "postgres"
)

// eventWriter writes events as JSON lines, one at a time.
type eventWriter struct {
	mu   sync.Mutex
	w    io.Writer
	proc string
}

func (e *eventWriter) emit(ev e2eEvent) {
	ev.Proc = e.proc
	b, _ := json.Marshal(ev)
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.w.Write(append(b, '\n'))
}

// RunE2EChild runs one child process of the e2e scenario, configured by
// the JSON in cfg, writing its history lines to out. `ctdispatch chaos
// e2e-child` calls it with $CTDISPATCH_E2E_CHILD.
func RunE2EChild(ctx context.Context, cfg string, out io.Writer) error {
	var c e2eChild
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		return fmt.Errorf("chaos: %s: %w", E2EChildEnv, err)
	}
	ew := &eventWriter{w: out, proc: c.Name}
	switch c.Role {
	case roleOrchestrator, roleRecover:
		return c.orchestrate(ctx, ew)
	case roleWorker:
		return c.serve(ctx, ew)
	}
	return fmt.Errorf("chaos: %s: role %q is not one of %s, %s, %s", E2EChildEnv, c.Role, roleOrchestrator, roleRecover, roleWorker)
}

// offsetClock is the real clock shifted by a fixed offset: a process
// whose clock is off by that much.
type offsetClock struct {
	clockwork.Clock
	off time.Duration
}

func (c offsetClock) Now() time.Time                  { return c.Clock.Now().Add(c.off) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c offsetClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// dispatcher opens the orchestrator's dispatcher on its store.
func (c *e2eChild) dispatcher(ctx context.Context, clock clockwork.Clock) (*cloudtasks.Dispatcher, func() error, error) {
	cfg := cloudtasks.Config{Project: project, Location: location, Queue: c.Queue, EmulatorAddr: c.Emulator,
		Clock: clock, StaleAfter: c.StaleAfter, Retry: cloudtasks.RetryPolicy{Initial: 5 * time.Millisecond, Max: 100 * time.Millisecond}}
	switch c.Store {
	case storeParquet:
		d, err := durability.OpenDispatcher(ctx, durability.Strict, parquetbox.Config{Root: c.Root, Clock: clock}, cfg)
		if err != nil {
			return nil, nil, err
		}
		return d.Dispatcher, func() error { return d.Close(context.Background()) }, nil
	case storePostgres:
		db, err := sql.Open("pgx", c.DSN)
		if err != nil {
			return nil, nil, err
		}
		box, err := pgbox.New(db, pgbox.Config{Clock: clock})
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		d, err := cloudtasks.NewDispatcher(ctx, box, &cfg)
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return d, func() error { return errors.Join(d.Close(context.Background()), db.Close()) }, nil
	}
	return nil, nil, fmt.Errorf("chaos: store %q is not %s or %s", c.Store, storeParquet, storePostgres)
}

// orchestrate runs the plan (every item, in the process's own order, 8 at
// a time) or, as the recover role, one Recover pass.
func (c *e2eChild) orchestrate(ctx context.Context, ew *eventWriter) error {
	clock := offsetClock{clockwork.NewRealClock(), c.ClockOffset}
	d, closeD, err := c.dispatcher(ctx, clock)
	if err != nil {
		return err
	}
	if c.Role == roleRecover {
		// Passes until one meets no error: the RPC faults hit GetTask
		// too, and a record Recover could not resolve stays pending. A
		// pass the outbox failed (PostgreSQL dropped or restarting) is
		// tried again after a backoff, as a scheduled Recover would be.
		var err error
		wait := 100 * time.Millisecond
		for pass := 0; pass < 10; pass++ {
			if err != nil {
				clock.Sleep(wait)
				wait = min(2*wait, 2*time.Second)
			}
			ew.emit(e2eEvent{Hop: hopOrchestrator, Op: "recover", Phase: "call"})
			var st cloudtasks.RecoverStats
			st, err = d.Recover(ctx)
			ev := e2eEvent{Hop: hopOrchestrator, Op: "recover", Phase: "answer",
				Detail: fmt.Sprintf("stale %d, found %d, not found %d, handed over %d, errors %d", st.Stale, st.Found, st.NotFound, st.HandedOver, st.Errors)}
			if err != nil {
				ev.Err = err.Error()
			}
			ew.emit(ev)
			if err == nil && st.Errors == 0 {
				break
			}
		}
		return errors.Join(err, closeD())
	}
	q := e2eRequests{run: c.Run, url: c.URL, account: c.Account, base: c.Base}
	plan := e2ePlan(c.Seed, c.Items)
	order := e2eOrder(c.Seed, c.Order, len(plan))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, i := range order {
		it := plan[i]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c.doItem(ctx, clock, d, q, it, ew)
		})
	}
	wg.Wait()
	return closeD()
}

// outboxTries bounds the calls of one item's operation while its outbox
// is unavailable: with the backoff below, about 3 s, longer than a
// PostgreSQL restart.
const outboxTries = 6

// doItem makes the calls of one item, each as a call event and an answer
// event. An answer with an error is an indeterminate call: the checker
// looks up how it resolved. A call the outbox failed (PostgreSQL dropped
// or restarting) is made again after a backoff, as an orchestrator that
// retries its work would.
func (c *e2eChild) doItem(ctx context.Context, clock clockwork.Clock, d *cloudtasks.Dispatcher, q e2eRequests, it e2eItem, ew *eventWriter) {
	id := q.id(it).String()
	call := func(op string, fn func() (string, error)) {
		wait := 100 * time.Millisecond
		for try := 1; ; try++ {
			ew.emit(e2eEvent{Hop: hopOrchestrator, Op: op, Phase: "call", ID: id})
			outcome, err := fn()
			ev := e2eEvent{Hop: hopOrchestrator, Op: op, Phase: "answer", ID: id, Outcome: outcome}
			switch {
			case errors.Is(err, cloudtasks.ErrNameHeld):
				// A definite answer: another process cancelled the ID.
				ev.Outcome = "name_held"
			case err != nil:
				ev.Err = err.Error()
			}
			ew.emit(ev)
			if !errors.Is(err, cloudtasks.ErrOutboxUnavailable) || try == outboxTries || ctx.Err() != nil {
				return
			}
			clock.Sleep(wait)
			wait *= 2
		}
	}
	switch {
	case it.isTimer():
		call("timer", func() (string, error) {
			res, err := d.ScheduleTimer(ctx, q.timer(it))
			return string(res.Outcome), err
		})
	default:
		call("dispatch", func() (string, error) {
			res, err := d.Dispatch(ctx, q.dispatch(it))
			return string(res.Outcome), err
		})
	}
	if it.Kind == itemCancel || it.Kind == itemCancelTimer {
		call("cancel", func() (string, error) {
			res, err := d.Cancel(ctx, id, "")
			return string(res.Outcome), err
		})
	}
}

// e2eInbox wraps the worker's SQL inbox: it writes each outcome to the
// history and, at the armed delivery, reaches the after-commit pause
// point (the key's done mark committed, the answer not yet sent).
type e2eInbox struct {
	worker.Inbox
	ew      *eventWriter
	n       atomic.Int64
	pauseAt []int64
	point   string
	mu      sync.Mutex
	paused  int // how many of pauseAt were reached
}

// pause reaches the armed point in the first delivery from the next armed
// one on that gets there (a duplicate never reaches the point before the
// commit), saying so first.
func (in *e2eInbox) pause(ctx context.Context, n int64, point, key string) {
	in.mu.Lock()
	due := point == in.point && in.paused < len(in.pauseAt) && n >= in.pauseAt[in.paused]
	if due {
		in.paused++
	}
	in.mu.Unlock()
	if !due {
		return
	}
	in.ew.emit(e2eEvent{Hop: hopWorker, Op: "pause", ID: key, Detail: point})
	pause.Point(point)
}

func (in *e2eInbox) Process(ctx context.Context, key string, wait time.Duration, work worker.Work) (worker.Outcome, error) {
	n := in.n.Add(1)
	out, err := in.Inbox.Process(ctx, key, wait, func(ctx context.Context, tx *sql.Tx) error {
		if err := work(ctx, tx); err != nil {
			return err
		}
		in.pause(ctx, n, pause.E2EWorkerBeforeCommit, key)
		return nil
	})
	ev := e2eEvent{Hop: hopWorker, Op: "inbox", ID: key, Outcome: string(out)}
	if err != nil {
		ev.Err = err.Error()
	}
	in.ew.emit(ev)
	if err == nil {
		in.pause(ctx, n, pause.E2EWorkerAfterCommit, key)
	}
	return out, err
}

// recordingOutbox writes to the history each delivery record the worker's
// outbox could not keep (the worker answers all the same), so the
// checker can tell a missing row from a lost one.
type recordingOutbox struct {
	outbox.Outbox
	ew *eventWriter
}

func (o recordingOutbox) Append(ctx context.Context, r outbox.Record, done func(error)) error {
	failed := func(err error) {
		id, _, _ := outbox.SplitDeliveryID(r.ID)
		o.ew.emit(e2eEvent{Hop: hopWorker, Op: "record_failed", ID: id, Outcome: string(r.Status), Status: int(r.Delivery.HTTPStatus), Err: err.Error()})
	}
	err := o.Outbox.Append(ctx, r, func(err error) {
		if err != nil {
			failed(err)
		}
		if done != nil {
			done(err)
		}
	})
	if err != nil {
		failed(err)
	}
	return err
}

// serve runs a worker: the cloudtasks/worker handler with its SQL inbox,
// applying one effect row per delivery inside the inbox's transaction,
// until the scenario kills it. Its first line names its address.
func (c *e2eChild) serve(ctx context.Context, ew *eventWriter) error {
	db, err := sql.Open("pgx", c.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	sqlInbox, err := worker.NewSQLInbox(db, worker.SQLConfig{})
	if err != nil {
		return err
	}
	deliveries, err := pgbox.New(db, pgbox.Config{TablePrefix: e2eWorkerPrefix})
	if err != nil {
		return err
	}
	inbox := &e2eInbox{Inbox: sqlInbox, ew: ew, pauseAt: c.PauseAt, point: c.PausePoint}
	var bypassed atomic.Bool
	insert := `INSERT INTO ` + e2eEffectsTable + ` (id, worker, retry_count) VALUES ($1, $2, $3)`
	w, err := worker.New(ctx, &worker.Config{
		Audiences: []string{c.URL}, ServiceAccounts: []string{c.Account},
		Issuers: []string{c.Issuer}, KeysClient: emulator.KeysClient(c.KeysAddr),
		Inbox: inbox, Outbox: recordingOutbox{deliveries, ew}, LockTimeout: time.Second,
		Clock: offsetClock{clockwork.NewRealClock(), c.ClockOffset},
	}, func(ctx context.Context, d *worker.Delivery) error {
		if c.BypassOnce && bypassed.CompareAndSwap(false, true) {
			// The planted fault: the effect commits on its own and the
			// delivery fails, so the redelivery applies it again. An
			// insert that fails (a dropped connection) leaves it armed.
			if _, err := db.ExecContext(ctx, insert, d.ID.String(), c.Name, d.RetryCount); err != nil {
				bypassed.Store(false)
				return err
			}
			return errors.New("planted fault: effect applied outside the inbox")
		}
		_, err := d.Tx().ExecContext(ctx, insert, d.ID.String(), c.Name, d.RetryCount)
		return err
	})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ew.emit(e2eEvent{Hop: hopWorker, Op: "listening", Detail: l.Addr().String(), Processor: deliveries.ProcessorUUID()})
	srv := &http.Server{Handler: w, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// e2eSetup creates the workers' tables (inbox, deliveries, effects) and,
// for the PostgreSQL leg, the orchestrators' outbox in db.
func e2eSetup(ctx context.Context, db *sql.DB, store string) error {
	if err := worker.Migrate(ctx, db, worker.SQLConfig{}); err != nil {
		return err
	}
	if err := pgbox.Migrate(ctx, db, pgbox.Config{TablePrefix: e2eWorkerPrefix}); err != nil {
		return err
	}
	if store == storePostgres {
		if err := pgbox.Migrate(ctx, db, pgbox.Config{}); err != nil {
			return err
		}
	}
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+e2eEffectsTable+` (seq bigserial PRIMARY KEY, id text NOT NULL, worker text NOT NULL, retry_count int NOT NULL, at timestamptz NOT NULL DEFAULT now())`)
	return err
}

// e2eRecords reads the latest record of every ID of run (dispatches,
// timers and deliveries) from an outbox.
func e2eRecords(ctx context.Context, box outbox.Outbox, run string) ([]outbox.Record, error) {
	return box.Lookup(ctx, outbox.Query{RunID: run})
}
