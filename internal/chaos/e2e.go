package chaos

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/pause"
	"github.com/ctdispatch/ctdispatch/internal/pgserver"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/parquetbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// The e2e scenario's cast and sizes.
const (
	// DefaultE2EItems is the number of logical attempts on each store;
	// Long multiplies it by LongFactor.
	DefaultE2EItems  = 150
	e2eOrchestrators = 3
	e2eWorkers       = 3
	// e2eRedeployQueue is the default queue of the redeployed
	// orchestrators: the replacement of the first SIGKILLed one, which
	// runs while the others do, and the one that repeats the whole plan at
	// the end. An ID it records first has its task there.
	e2eRedeployQueue = "work-redeployed"
	e2eURL           = "http://workers.e2e.internal/effect"
	e2eAccount       = "e2e@chaos.iam.gserviceaccount.com"
	// e2eStall is how long a worker stays stopped inside its inbox
	// transaction: past its one-second lock timeout.
	e2eStall = 2500 * time.Millisecond
	// e2eStaleAfter is the orchestrators' Config.StaleAfter: a stopped
	// orchestrator stays stopped past it before another process runs
	// Recover. The clock offsets stay well within it (docs/consistency.md:
	// clocks apart by less than StaleAfter minus the longest call).
	e2eStaleAfter = 4 * time.Second
	e2eClockStep  = time.Second
	// e2eDrain bounds the wait for the emulator to deliver everything.
	e2eDrain = 2 * time.Minute
)

// The fault kinds of the e2e scenario, by hop, in the order the report
// lists them. Each planned kind must land at least once on each store.
const (
	faultOrchKill      = "orchestrator SIGKILLed on an answer"
	faultOrchStop      = "orchestrator SIGSTOPped on an answer, its pending records re-driven by another process's Recover, then SIGCONTed"
	faultRedeploy      = "replaced by a redeploy with another default queue while the others run"
	faultClock         = "orchestrator and worker clocks offset by ±1 s (stale-after 4 s)"
	faultRPCCommitFail = "CreateTask/GetTask/DeleteTask committed, then failed (reply lost)"
	faultRPCFail       = "CreateTask/GetTask/DeleteTask failed"
	faultWorkerBefore  = "worker SIGKILLed before its commit"
	faultWorkerAfter   = "worker SIGKILLed after its commit, before answering"
	faultWorkerStall   = "worker stopped inside its transaction past the lock timeout"
	faultPGTerminate   = "PostgreSQL connections dropped (pg_terminate_backend)"
	faultPGRestart     = "PostgreSQL restarted in immediate mode"
	// faultDropCreate is planted by a mutation test only.
	faultDropCreate = "create answered OK, task dropped (planted)"
)

// e2eHops lists the fault kinds per hop for the report.
var e2eHops = []struct {
	hop   string
	kinds []string
}{
	{"orchestrators", []string{faultOrchKill, faultOrchStop, faultRedeploy, faultClock}},
	{"Cloud Tasks API", []string{faultRPCCommitFail, faultRPCFail, faultDropCreate}},
	{"delivery", []string{faultDupAfter2xx, faultLost2xx, faultDelay, faultReset, faultDeadline, faultDropped}},
	{"workers", []string{faultWorkerBefore, faultWorkerAfter, faultWorkerStall}},
	{"PostgreSQL", []string{faultPGTerminate, faultPGRestart}},
}

// e2eRPCFaults is the emulator's fault plan: one call in ten of the
// dispatcher's RPCs fails, half of those after taking effect.
func e2eRPCFaults(seed uint64) emulator.Faults {
	m := []string{"CreateTask", "GetTask", "DeleteTask"}
	return emulator.Faults{Seed: seed, Rules: []emulator.FaultRule{
		{Methods: m, Rate: 0.05, Code: codes.Unavailable, CommitThenFail: true},
		{Methods: m, Rate: 0.05, Code: codes.Unavailable},
	}}
}

// e2eMutation plants a fault in the running system that the checker must
// catch; tests set it.
type e2eMutation string

const (
	mutationBypassInbox  e2eMutation = "bypass-inbox"
	mutationDropDelivery e2eMutation = "drop-delivery"
	mutationDropCreate   e2eMutation = "drop-create"
)

// faultCounter counts the faults that landed, by kind.
type faultCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *faultCounter) add(kind string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[kind] += n
}

func (c *faultCounter) get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[kind]
}

// rpcFaultHandler counts the emulator's injected RPC failures from its
// debug log.
type rpcFaultHandler struct{ c *faultCounter }

func (h rpcFaultHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h rpcFaultHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h rpcFaultHandler) WithGroup(string) slog.Handler            { return h }
func (h rpcFaultHandler) Handle(_ context.Context, r slog.Record) error {
	switch r.Message {
	case "rpc fault: committed, then failed":
		h.c.add(faultRPCCommitFail, 1)
	case "rpc":
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" && strings.Contains(a.Value.String(), "injected fault") && !strings.Contains(a.Value.String(), "after the call took effect") {
				h.c.add(faultRPCFail, 1)
			}
			return true
		})
	}
	return nil
}

// history is the leg's JSON-lines history, kept in memory for the
// checker too.
type history struct {
	mu     sync.Mutex
	w      *bufio.Writer
	events []e2eEvent
}

func (h *history) add(ev e2eEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ev.Seq = len(h.events) + 1
	h.events = append(h.events, ev)
	b, _ := json.Marshal(ev)
	h.w.Write(append(b, '\n'))
}

// e2eLeg is one store's run.
type e2eLeg struct {
	r       *run
	store   string
	n       int
	seed    uint64
	rng     *rand.Rand
	dir     string
	dsn     string
	cluster *pgserver.Cluster
	db      *sql.DB
	emu     *emulator.Server
	// lb sends the emulator's deliveries to the live workers; ledger
	// keeps what the emulator's delivery faults did.
	lb      *balancer
	ledger  *deliveryLedger
	hist    *history
	faults  *faultCounter
	base    time.Time
	run     string
	mutate  e2eMutation
	dropped atomic.Bool
	workers struct {
		mu   sync.Mutex
		live map[string]string // name -> addr
	}
	// orchestrators counts the orchestrator processes running; answers
	// counts their answers, on which the PostgreSQL faults are planned.
	orchestrators atomic.Int64
	answers       atomic.Int64
	// pgFaults runs the PostgreSQL faults planned at answers one at a
	// time; the leg waits for them before its final passes.
	pgFaults struct {
		sync.Mutex
		wg     sync.WaitGroup
		planMu sync.Mutex
		at     map[int64]string // answers total -> fault kind
	}
	problems []string
	pmu      sync.Mutex
}

func (l *e2eLeg) problem(format string, args ...any) {
	l.pmu.Lock()
	defer l.pmu.Unlock()
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}

// e2e: three orchestrator processes dispatch, schedule timers and cancel
// on a shared store (a Parquet directory, then PostgreSQL) while the
// emulator delivers over HTTP with OIDC tokens to three worker processes
// that apply an effect inside their SQL inbox's transaction, with faults
// at every hop; a checker then reads the history and the final state.
func (r *run) e2e(ctx context.Context) Result {
	n := r.opts.size(DefaultE2EItems)
	kills := 1
	if r.opts.Long {
		kills = 3
	}
	tried := fmt.Sprintf("on a Parquet directory and on PostgreSQL, %d orchestrator processes ran the same %d logical attempts (dispatches, fired retry timers, held heartbeats, cancels) in their own orders, %d SIGKILLed (on PostgreSQL the first replaced by a redeploy with another default queue while the others ran) and %d SIGSTOPped (with Recover by another process) on answers still to come, then a redeployed one repeated them all; the emulator delivered over HTTP with OIDC tokens to %d worker processes (SQL inbox, effect row in its transaction; kills before the commit: %d, after it: %d, stalls past the lock timeout: %d) with faults at every hop, and PostgreSQL's connections dropped (%d) and the server restarted in immediate mode (%d)",
		e2eOrchestrators, n, 2*kills, kills, e2eWorkers, kills, kills, kills, 2*kills, kills)
	fail := func(problems ...string) Result { return failed(tried, problems) }
	cluster, err := pgserver.Start()
	if err != nil {
		return fail("start PostgreSQL: " + err.Error())
	}
	defer cluster.Stop()
	rng := r.rng(ScenarioE2E)
	var held []string
	var problems []string
	stores := []string{storeParquet, storePostgres}
	if len(r.opts.e2eStores) > 0 {
		stores = r.opts.e2eStores
	}
	for _, store := range stores {
		l := &e2eLeg{r: r, store: store, n: n, seed: rng.Uint64(), faults: &faultCounter{}, mutate: r.opts.e2eMutation}
		l.rng = rand.New(rand.NewPCG(l.seed, 1))
		rep, faults, secs := l.runLeg(ctx, cluster, kills)
		for _, p := range l.problems {
			problems = append(problems, store+": "+p)
		}
		for _, p := range rep.Problems {
			problems = append(problems, store+": "+p)
		}
		held = append(held, fmt.Sprintf("%s (seed %d, %.0f s): %s; faults: %s", store, l.seed, secs, rep.line(), faults))
		if r.opts.e2eReport != nil {
			r.opts.e2eReport(store, rep)
		}
	}
	if len(problems) > 0 {
		res := fail(problems...)
		res.Held += "; " + strings.Join(held, "; ")
		return res
	}
	return Result{Passed: true, Tried: tried, Held: "no lost or duplicate effect, every call resolved, outbox, emulator, effects and deliveries table agree: " + strings.Join(held, "; ")}
}

// runLeg runs one store's leg and checks it. It returns the checker's
// report, the faults line and the wall time.
func (l *e2eLeg) runLeg(ctx context.Context, cluster *pgserver.Cluster, kills int) (e2eReport, string, float64) {
	start := time.Now()
	var rep e2eReport
	l.dir = filepath.Join(l.r.dir, "e2e-"+l.store)
	l.run = "e2e-" + l.store
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		l.problem("%v", err)
		return rep, "", 0
	}
	dsn, drop, err := cluster.CreateDatabase(ctx)
	if err != nil {
		l.problem("%v", err)
		return rep, "", 0
	}
	defer drop()
	l.dsn, l.cluster = dsn, cluster
	if l.db, err = sql.Open("pgx", dsn); err != nil {
		l.problem("%v", err)
		return rep, "", 0
	}
	defer l.db.Close()
	// The suite's own statements (dropping connections, the final reads)
	// must not meet a pooled connection a restart killed: each takes a new
	// one.
	l.db.SetMaxIdleConns(0)
	if err := e2eSetup(ctx, l.db, l.store); err != nil {
		l.problem("set up the database: %v", err)
		return rep, "", 0
	}
	hf, err := os.Create(filepath.Join(l.dir, "history.jsonl"))
	if err != nil {
		l.problem("%v", err)
		return rep, "", 0
	}
	l.hist = &history{w: bufio.NewWriter(hf)}
	defer func() { l.hist.w.Flush(); hf.Close() }()

	l.base = time.Now().UTC().Truncate(time.Second)
	q := e2eRequests{run: l.run, url: e2eURL, account: e2eAccount, base: l.base}
	kinds := deliveryKinds
	if l.mutate == mutationDropDelivery {
		kinds = append(slices.Clone(kinds), faultDropped)
	}
	var firstOrders []uint64 // orchestratorSlot's first runs: Order slot*100
	for slot := range e2eOrchestrators {
		firstOrders = append(firstOrders, uint64(slot*100))
	}
	planned := assignDeliveryFaults(e2ePlan(l.seed, l.n), q, l.seed, firstOrders, kinds)
	l.lb, l.ledger = newBalancer(), newDeliveryLedger(planned, l.hist.add)
	queue := func(id string) emulator.QueueConfig {
		return emulator.QueueConfig{Name: "projects/" + project + "/locations/" + location + "/queues/" + id,
			MaxAttempts: -1, MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second,
			MaxDispatchesPerSecond: 500, MaxConcurrentDispatches: 100}
	}
	l.emu, err = emulator.New(emulator.Config{
		Queues:           []emulator.QueueConfig{queue(queueID), queue(e2eRedeployQueue)},
		HTTPClient:       &http.Client{Transport: l.lb},
		DeliveryFaults:   e2eDeliveryFaults(l.rng.Uint64(), planned, l.ledger),
		Faults:           e2eRPCFaults(l.rng.Uint64()),
		DeliveryLogLimit: 1 << 20,
		Logger:           slog.New(rpcFaultHandler{l.faults}),
	})
	if err != nil {
		l.problem("start emulator: %v", err)
		return rep, "", 0
	}
	defer l.emu.Close()
	l.workers.live = map[string]string{}

	// Workers run until the drain is over.
	wctx, stopWorkers := context.WithCancel(ctx)
	var wwg sync.WaitGroup
	workerPlans := []string{pause.E2EWorkerBeforeCommit, pause.E2EWorkerAfterCommit, "stall"}
	l.pgFaults.at = l.planPGFaults(kills)
	for w := range e2eWorkers {
		// Each planned fault of the slot is at the k-th delivery of one
		// process (a killed worker's replacement counts afresh), within
		// the first tenth of the plan in all.
		pauseAt := make([]int64, kills)
		for i := range pauseAt {
			pauseAt[i] = 1 + l.rng.Int64N(int64(max(1, l.n/(10*kills))))
		}
		wwg.Go(func() { l.workerSlot(wctx, w, workerPlans[w], pauseAt) })
	}
	if !l.waitWorkers(ctx) {
		stopWorkers()
		wwg.Wait()
		l.pgFaults.wg.Wait()
		return rep, "", 0
	}

	// Orchestrators: each slot runs the plan to the end, through its kills.
	var owg sync.WaitGroup
	for o := range e2eOrchestrators {
		plans := make([]int, kills)
		for i := range plans {
			plans[i] = 1 + l.rng.IntN(max(1, l.n/2))
		}
		if o == 0 {
			// Slot 0's replacement is the redeploy: early, so that it
			// meets IDs no one has recorded yet.
			plans[0] = 1 + l.rng.IntN(max(1, l.n/10))
		}
		offset := time.Duration(o-1) * e2eClockStep
		owg.Go(func() { l.orchestratorSlot(ctx, o, plans, offset) })
	}
	owg.Wait()
	l.pgFaults.wg.Wait()
	if offsets := e2eOrchestrators; offsets > 1 {
		l.faults.add(faultClock, offsets-1)
	}
	// A last Recover for records a killed process left pending, then the
	// redeployed orchestrator repeats everything on another default queue.
	// Every orchestrator has exited: all pending records are stale.
	if _, err := l.child(ctx, e2eChild{Role: roleRecover, Name: "recover-final", StaleAfter: time.Nanosecond}, nil); err != nil {
		l.problem("final recover: %v", err)
	}
	if _, err := l.child(ctx, e2eChild{Role: roleOrchestrator, Name: "redeployed", Queue: e2eRedeployQueue, Order: 99}, nil); err != nil {
		l.problem("redeployed orchestrator: %v", err)
	}
	// Recover runs again, as it would on a schedule: a call of the
	// redeployed orchestrator that gave up left its record pending.
	if _, err := l.child(ctx, e2eChild{Role: roleRecover, Name: "recover-last", StaleAfter: time.Nanosecond}, nil); err != nil {
		l.problem("last recover: %v", err)
	}
	l.drain(ctx)
	stopWorkers()
	wwg.Wait()
	l.pgFaults.wg.Wait()

	final, err := l.final(ctx)
	if err != nil {
		l.problem("read the final state: %v", err)
		return rep, "", time.Since(start).Seconds()
	}
	for _, d := range final.deliveries {
		l.hist.add(e2eEvent{Hop: hopEmulator, Op: "delivery", ID: d.Header.Get("Idempotency-Key"), Attempt: int(d.Attempt), Status: d.StatusCode, Outcome: d.Outcome, Err: d.Err, Detail: d.Queue})
	}
	l.hist.mu.Lock()
	events := slices.Clone(l.hist.events)
	l.hist.mu.Unlock()
	rep = checkE2E(e2ePlan(l.seed, l.n), q, events, final)
	return rep, l.faultLine(), time.Since(start).Seconds()
}

// faultLine lists the faults that landed per hop, and flags a planned
// kind that never landed.
func (l *e2eLeg) faultLine() string {
	dc, _ := l.ledger.snapshot()
	for k, v := range dc {
		l.faults.add(k, v)
	}
	unlanded := l.ledger.unlanded()
	for _, id := range slices.Sorted(maps.Keys(unlanded)) {
		l.problem("planned delivery fault never landed on its item %s: %s", id, unlanded[id])
	}
	var hops []string
	for _, h := range e2eHops {
		var kinds []string
		for _, k := range h.kinds {
			n := l.faults.get(k)
			if (k == faultDropped && l.mutate != mutationDropDelivery) || (k == faultDropCreate && l.mutate != mutationDropCreate) || (k == faultRedeploy && l.store != storePostgres) {
				continue
			}
			if n == 0 {
				l.problem("planned fault never landed: %s", k)
			}
			kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
		}
		hops = append(hops, h.hop+" ("+strings.Join(kinds, ", ")+")")
	}
	return strings.Join(hops, "; ")
}

// child runs one child process of the leg to its end, its history lines
// added as they come; onLine, when set, sees each event and the command.
func (l *e2eLeg) child(ctx context.Context, c e2eChild, onLine func(e2eEvent, *exec.Cmd)) (killed bool, err error) {
	cmd, err := l.start(ctx, c, nil)
	if err != nil {
		return false, err
	}
	return l.follow(ctx, cmd, onLine)
}

// start starts a child with the leg's settings filled into c.
func (l *e2eLeg) start(ctx context.Context, c e2eChild, env []string) (*exec.Cmd, error) {
	c.Store, c.Root, c.DSN, c.Emulator = l.store, filepath.Join(l.dir, "outbox"), l.dsn, l.emu.Addr()
	if c.Queue == "" {
		c.Queue = queueID
	}
	c.Seed, c.Items, c.Run, c.URL, c.Account, c.Base = l.seed, l.n, l.run, e2eURL, e2eAccount, l.base
	c.Issuer, c.KeysAddr = l.emu.Issuer(), l.emu.HTTPAddr()
	if c.StaleAfter == 0 {
		c.StaleAfter = e2eStaleAfter
	}
	b, _ := json.Marshal(c)
	cmd := l.r.command(ctx, "chaos", "e2e-child")
	cmd.Env = append(append(cmd.Env, E2EChildEnv+"="+string(b)), env...)
	return cmd, nil
}

// follow runs cmd, adding its stdout lines to the history; a SIGKILL we
// sent is not an error.
func (l *e2eLeg) follow(ctx context.Context, cmd *exec.Cmd, onLine func(e2eEvent, *exec.Cmd)) (killed bool, err error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return false, err
	}
	var stderr strings.Builder
	if cmd.Stderr == nil {
		cmd.Stderr = &stderr
	}
	if err := cmd.Start(); err != nil {
		return false, err
	}
	rerr := readEvents(stdout, func(ev e2eEvent) {
		l.hist.add(ev)
		if onLine != nil {
			onLine(ev, cmd)
		}
	})
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true, nil
		}
	}
	if err = errors.Join(err, rerr); err != nil {
		return false, fmt.Errorf("%v: %s", err, firstLine(stderr.String()))
	}
	return false, nil
}

// readEvents reads a child's events (see readJSONLines).
func readEvents(r io.Reader, fn func(e2eEvent)) error { return readJSONLines(r, fn) }

// orchestratorSlot runs one orchestrator through its planned faults:
// slot 1 is SIGSTOPped on the planned answers (another process runs
// Recover meanwhile), the others SIGKILLed; each run after a fault starts
// the plan again in a new order. On PostgreSQL, slot 0's replacements
// are a redeploy with another default queue, as a rolling deploy would
// bring while the other slots still run the old one. Not on a Parquet
// directory: two processes may write an ID's first record blind of each
// other there, and with two default queues that makes a task in each
// (see docs/chaos.md, open finding).
func (l *e2eLeg) orchestratorSlot(ctx context.Context, slot int, plans []int, offset time.Duration) {
	stop := slot == 1
	for run := 0; ctx.Err() == nil; run++ {
		name := fmt.Sprintf("o%d.%d", slot+1, run)
		queue := ""
		if slot == 0 && run > 0 && l.store == storePostgres {
			queue = e2eRedeployQueue
			if run == 1 {
				l.hist.add(e2eEvent{Proc: name, Hop: hopOrchestrator, Op: "redeployed", Detail: fmt.Sprintf("default queue %s, %d other orchestrators running", queue, l.orchestrators.Load())})
				l.faults.add(faultRedeploy, 1)
			}
		}
		at := 0
		if run < len(plans) {
			at = plans[run]
		}
		answers := 0
		var acted atomic.Bool
		onLine := func(ev e2eEvent, cmd *exec.Cmd) {
			l.dropCreate(ctx, ev)
			if ev.Phase != "answer" {
				return
			}
			if kind := l.pgFaultAt(l.answers.Add(1)); kind != "" {
				l.pgFaults.wg.Go(func() { l.pgFault(ctx, kind) })
			}
			answers++
			if answers != at || !acted.CompareAndSwap(false, true) {
				return
			}
			if !stop {
				l.hist.add(e2eEvent{Proc: name, Hop: hopOrchestrator, Op: "killed"})
				_ = cmd.Process.Signal(syscall.SIGKILL)
				return
			}
			// Stopped with calls in flight past the stale-after time:
			// another process re-drives its pending records, then it
			// goes on. The stop is a duration by nature.
			_ = cmd.Process.Signal(syscall.SIGSTOP)
			l.hist.add(e2eEvent{Proc: name, Hop: hopOrchestrator, Op: "stopped"})
			time.Sleep(e2eStaleAfter + 500*time.Millisecond)
			if _, err := l.child(ctx, e2eChild{Role: roleRecover, Name: fmt.Sprintf("recover-%s", name), StaleAfter: e2eStaleAfter}, nil); err != nil {
				l.problem("recover while %s is stopped: %v", name, err)
			}
			l.faults.add(faultOrchStop, 1)
			l.hist.add(e2eEvent{Proc: name, Hop: hopOrchestrator, Op: "continued"})
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
		c := e2eChild{Role: roleOrchestrator, Name: name, Queue: queue, Order: uint64(slot*100 + run), ClockOffset: offset}
		l.orchestrators.Add(1)
		killed, err := l.child(ctx, c, onLine)
		l.orchestrators.Add(-1)
		switch {
		case err != nil:
			l.problem("%s: %v", name, err)
			return
		case killed:
			l.faults.add(faultOrchKill, 1)
			continue
		case at > 0 && !acted.Load():
			l.problem("%s finished before its planned answer %d (it gave %d)", name, at, answers)
			return
		case at > 0 && run+1 < len(plans):
			continue // stopped and finished: the next stop
		}
		return
	}
}

// dropCreate plants mutationDropCreate: the first held timer answered
// "created" loses its task, as if the emulator had dropped the create
// while answering OK.
func (l *e2eLeg) dropCreate(ctx context.Context, ev e2eEvent) {
	if l.mutate != mutationDropCreate || ev.Phase != "answer" || ev.Outcome != "created" || !strings.HasPrefix(ev.ID, "timer:heartbeat:") {
		return
	}
	q := e2eRequests{run: l.run, url: e2eURL, account: e2eAccount, base: l.base}
	for _, it := range e2ePlan(l.seed, l.n) {
		if it.Kind != itemHeld || q.id(it).String() != ev.ID || !l.dropped.CompareAndSwap(false, true) {
			continue
		}
		c, err := l.emu.NewClient(ctx)
		if err != nil {
			l.problem("drop a create: %v", err)
			return
		}
		defer c.Close()
		name := q.id(it).TaskName("projects/" + project + "/locations/" + location + "/queues/" + queueID)
		if err := c.DeleteTask(ctx, &cloudtaskspb.DeleteTaskRequest{Name: name}); err != nil {
			l.problem("drop a create: %v", err)
		}
		l.faults.add(faultDropCreate, 1)
		return
	}
}

// workerSlot keeps one worker up until ctx ends, through its planned
// faults, each at the pauseAt[i]-th delivery of a process: a killed
// worker's replacement is armed with the next one, a stalled worker stalls
// again at the next one.
func (l *e2eLeg) workerSlot(ctx context.Context, slot int, plan string, pauseAt []int64) {
	for run := 0; ctx.Err() == nil; run++ {
		name := fmt.Sprintf("w%d.%d", slot+1, run)
		c := e2eChild{Role: roleWorker, Name: name, ClockOffset: time.Duration(slot-1) * e2eClockStep}
		var env []string
		switch {
		case plan == "stall" && run == 0:
			// One process: its stalls at increasing deliveries.
			c.PausePoint = pause.E2EWorkerBeforeCommit
			var at int64
			for _, k := range pauseAt {
				at += k
				c.PauseAt = append(c.PauseAt, at)
			}
			c.BypassOnce = l.mutate == mutationBypassInbox // a worker the run does not kill
		case plan != "stall" && run < len(pauseAt):
			c.PauseAt, c.PausePoint = pauseAt[run:run+1], plan
		}
		if len(c.PauseAt) > 0 {
			env = append(env, pause.EnvVar+"="+strings.Repeat(","+c.PausePoint, len(c.PauseAt))[1:])
		}
		cmd, err := l.start(ctx, c, env)
		if err != nil {
			l.problem("%s: %v", name, err)
			return
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			l.problem("%s: %v", name, err)
			return
		}
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if !strings.HasPrefix(sc.Text(), "pause: stopped at ") {
					continue
				}
				if plan == "stall" {
					time.Sleep(e2eStall) // the fault is the duration itself
					l.faults.add(faultWorkerStall, 1)
					_ = cmd.Process.Signal(syscall.SIGCONT)
					continue
				}
				l.setWorker(name, "")
				l.hist.add(e2eEvent{Proc: name, Hop: hopWorker, Op: "killed", Detail: plan})
				_ = cmd.Process.Signal(syscall.SIGKILL)
				l.faults.add(map[string]string{pause.E2EWorkerBeforeCommit: faultWorkerBefore, pause.E2EWorkerAfterCommit: faultWorkerAfter}[plan], 1)
			}
		}()
		_, err = l.follow(ctx, cmd, func(ev e2eEvent, _ *exec.Cmd) {
			if ev.Op == "listening" {
				l.setWorker(name, ev.Detail)
			}
		})
		l.setWorker(name, "")
		if err != nil && ctx.Err() == nil {
			l.problem("%s: %v", name, err)
			return
		}
	}
}

// setWorker adds a worker's address to the balancer, or removes it.
func (l *e2eLeg) setWorker(name, addr string) {
	l.workers.mu.Lock()
	defer l.workers.mu.Unlock()
	if addr == "" {
		delete(l.workers.live, name)
	} else {
		l.workers.live[name] = addr
	}
	l.lb.setWorkers(slices.Sorted(maps.Values(l.workers.live)))
}

// waitWorkers waits until every worker listens.
func (l *e2eLeg) waitWorkers(ctx context.Context) bool {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		l.workers.mu.Lock()
		n := len(l.workers.live)
		l.workers.mu.Unlock()
		if n == e2eWorkers {
			return true
		}
		time.Sleep(20 * time.Millisecond) // a process starting has no event to wait on
	}
	l.problem("the workers did not all start within a minute")
	return false
}

// planPGFaults draws the PostgreSQL faults, each at a distinct total of
// the orchestrators' answers up to the plan's size, which they are sure
// to give (the slot that is only stopped answers every item), so each
// lands while orchestrators and workers run: 2*kills rounds of dropped
// connections and kills restarts.
func (l *e2eLeg) planPGFaults(kills int) map[int64]string {
	at := map[int64]string{}
	span := int64(max(4*kills, l.n))
	add := func(kind string, times int) {
		for range times {
			k := 1 + l.rng.Int64N(span)
			for at[k] != "" {
				k = k%span + 1
			}
			at[k] = kind
		}
	}
	add(faultPGTerminate, 2*kills)
	add(faultPGRestart, kills)
	return at
}

// pgFaultAt takes the PostgreSQL fault planned at the n-th answer.
func (l *e2eLeg) pgFaultAt(n int64) string {
	l.pgFaults.planMu.Lock()
	defer l.pgFaults.planMu.Unlock()
	kind := l.pgFaults.at[n]
	delete(l.pgFaults.at, n)
	return kind
}

// pgFault runs one PostgreSQL fault, after any other has ended. A round
// of dropped connections that found none (it came just after a restart,
// before anyone reconnected) is planned again a few answers later.
func (l *e2eLeg) pgFault(ctx context.Context, kind string) {
	l.pgFaults.Lock()
	defer l.pgFaults.Unlock()
	switch kind {
	case faultPGTerminate:
		if !l.terminateBackends(ctx) {
			l.pgFaults.planMu.Lock()
			defer l.pgFaults.planMu.Unlock()
			k := l.answers.Load() + 5
			for l.pgFaults.at[k] != "" {
				k++
			}
			l.pgFaults.at[k] = kind
		}
	case faultPGRestart:
		l.restartPostgres(ctx)
	}
}

// restartPostgres crashes the cluster and starts it again: every session
// of the workers and of the PostgreSQL leg's orchestrators dies, and
// their calls fail until it is back.
func (l *e2eLeg) restartPostgres(ctx context.Context) {
	l.hist.add(e2eEvent{Proc: "suite", Hop: hopPostgres, Op: "restart", Phase: "call", Detail: fmt.Sprintf("%d orchestrators running", l.orchestrators.Load())})
	start := time.Now()
	if err := l.cluster.Restart(ctx); err != nil {
		l.problem("restart PostgreSQL: %v", err)
		return
	}
	l.hist.add(e2eEvent{Proc: "suite", Hop: hopPostgres, Op: "restart", Phase: "answer", Detail: fmt.Sprintf("accepting connections after %d ms", time.Since(start).Milliseconds())})
	l.faults.add(faultPGRestart, 1)
}

// terminateBackends drops every other connection to the leg's database
// and reports whether it found any.
func (l *e2eLeg) terminateBackends(ctx context.Context) bool {
	var n int
	err := l.db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()) t`).Scan(&n)
	if err != nil {
		l.problem("pg_terminate_backend: %v", err)
		return true // not to be tried again
	}
	l.hist.add(e2eEvent{Proc: "suite", Hop: hopPostgres, Op: "terminate", Detail: fmt.Sprintf("%d backends", n)})
	if n > 0 {
		l.faults.add(faultPGTerminate, 1)
	}
	return n > 0
}

// drain waits until the emulator holds only the held timers' tasks and no
// attempt is running: everything else was delivered.
func (l *e2eLeg) drain(ctx context.Context) {
	held := 0
	for _, it := range e2ePlan(l.seed, l.n) {
		if it.Kind == itemHeld {
			held++
		}
	}
	deadline := time.Now().Add(e2eDrain)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if l.emu.TaskCount() <= held {
			// Attempts still running finish before the workers stop.
			if _, err := l.emu.RunDue(ctx); err == nil {
				return
			}
		}
		time.Sleep(50 * time.Millisecond) // deliveries run on the emulator's clock
	}
	l.problem("the emulator still held %d tasks (%d held timers) %s after the last orchestrator", l.emu.TaskCount(), held, e2eDrain)
}

// final reads the state the checker needs.
func (l *e2eLeg) final(ctx context.Context) (e2eFinal, error) {
	f := e2eFinal{records: map[string]outbox.Record{}, tasks: map[string][]string{}, effects: map[string]int{}}
	var box outbox.Outbox
	switch l.store {
	case storeParquet:
		ob, err := parquetbox.Open(ctx, parquetbox.Config{Root: filepath.Join(l.dir, "outbox"), ReadOnly: true, RefreshInterval: -1})
		if err != nil {
			return f, err
		}
		defer ob.Close()
		box = ob
	default:
		ob, err := pgbox.New(l.db, pgbox.Config{})
		if err != nil {
			return f, err
		}
		box = ob
	}
	recs, err := e2eRecords(ctx, box, l.run)
	if err != nil {
		return f, err
	}
	for _, r := range recs {
		f.records[r.ID] = r
	}
	wb, err := pgbox.New(l.db, pgbox.Config{TablePrefix: e2eWorkerPrefix})
	if err != nil {
		return f, err
	}
	if f.deliveryRows, err = wb.Lookup(ctx, outbox.Query{Table: outbox.TableDeliveries, RunID: l.run}); err != nil {
		return f, err
	}
	for _, q := range l.emu.Queues() {
		for _, t := range l.emu.Tasks(q.GetName()) {
			cid := t.GetName()[strings.LastIndexByte(t.GetName(), '/')+1:]
			f.tasks[cid] = append(f.tasks[cid], q.GetName())
		}
	}
	f.deliveries = l.emu.Deliveries()
	// The effects join the history, each with the worker that applied it.
	rows, err := l.db.QueryContext(ctx, `SELECT id, worker, retry_count FROM `+e2eEffectsTable+` ORDER BY seq`)
	if err != nil {
		return f, err
	}
	defer rows.Close()
	for rows.Next() {
		var ev e2eEvent
		if err := rows.Scan(&ev.ID, &ev.Proc, &ev.Attempt); err != nil {
			return f, err
		}
		ev.Hop, ev.Op = hopWorker, "effect"
		l.hist.add(ev)
		f.effects[ev.ID]++
	}
	dc, extra := l.ledger.snapshot()
	f.extra2xx, f.dropped = extra, dc[faultDropped]
	return f, rows.Err()
}
