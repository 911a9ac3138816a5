package cloudtasks

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// opKind is the operation a flight performs for an ID.
type opKind uint8

const (
	opCreate  opKind = iota // Dispatch and ScheduleTimer
	opCancel                // Cancel and CancelTimer
	opRecover               // one record of a Recover pass
	opRelay                 // one intent of a relay pass
)

// verdict is what a recover flight decided about one pending record.
type verdict string

// The verdicts of a recover flight; they double as the "result" metric
// attribute.
const (
	verdictMoved    verdict = "moved" // finished or re-driven meanwhile
	verdictExisted  verdict = "already_existed"
	verdictNotFound verdict = "not_found"
)

// flight is the work of one operation on one ID, shared by every identical
// call that arrives while it runs. Its answer fields are written by the
// work before ready is closed and only read after.
type flight struct {
	op    opKind
	ready chan struct{} // closed once the answer is set
	done  chan struct{} // closed once the work, its records included, ended

	// span is the leader's span, which the callers that joined link to.
	span trace.SpanContext

	// create
	fp         string // the leader's payload fingerprint
	recorded   string // the outbox's fingerprint, when it conflicted with fp
	recovering bool   // the create is over a stale pending record
	res        DispatchResult
	// cancel
	cancelled CancelResult
	// recover
	verdict verdict
	// relay: the status recorded, "" when the ID had moved on
	relayed outbox.Status

	err      error
	answered bool // touched by the work goroutine only
	// later is set by work that finishes the flight itself, once its
	// last record is written (see Dispatcher.recordOutcome).
	later bool
}

// answer publishes the flight's answer to its callers; the work may go on
// (recording the outcome) after it.
func (f *flight) answer() {
	if !f.answered {
		f.answered = true
		close(f.ready)
	}
}

// isAnswered reports whether the flight's answer is published.
func (f *flight) isAnswered() bool {
	select {
	case <-f.ready:
		return true
	default:
		return false
	}
}

// flights is the table of work in flight, one entry per ID whatever the
// operation, so that a Dispatch, a Cancel and a Recover of one ID never
// race on its record. It also counts the work still running for Close.
type flights struct {
	mu       sync.Mutex
	m        map[string]*flight
	running  int
	relaying int // the relay's flights among running: its drain bounds them
	closing  bool
	idle     []chan struct{} // closed when running next reaches 0
	// closed when only relay flights run: what Close waits for
	idleButRelay []chan struct{}
	workers      workers
}

// workers runs flights on goroutines that ran an earlier flight. A new
// goroutine's stack starts small and is grown by copying on the way down
// a gRPC call, every call: in a profile of Dispatch without an outbox that
// copying took about 7% of the CPU. A worker idle for workerIdle exits.
type workers struct {
	once sync.Once
	jobs chan func()
}

const workerIdle = 5 * time.Second

// start runs fn on an idle worker, or on a new one when none is idle.
func (w *workers) start(fn func()) {
	w.once.Do(func() { w.jobs = make(chan func()) })
	select {
	case w.jobs <- fn:
	default:
		go w.loop(fn)
	}
}

func (w *workers) loop(fn func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(workerIdle)
		select {
		case fn = <-w.jobs:
		case <-idle.C:
			return
		}
	}
}

// joined says how a caller met the flight whose answer it got.
type joined uint8

const (
	ledFlight    joined = iota // it started the flight
	sharedFlight               // it joined while the work ran, before the answer
)

// do returns the answer of the flight of op for key: a flight of the same
// op that has not answered yet is joined; a flight of another op, or one
// that answered and is still writing its record, is waited out first;
// otherwise a new flight runs work in its own goroutine. Only calls that
// overlap the work share its answer: a call that starts after the answer
// must not take it, since another process may have changed the ID in
// between (a cancel, say), and only the store knows. Every caller waits on its own ctx only: when ctx ends first,
// do returns ctx.Err() and the work goes on. do fails with ErrClosed once
// close was called.
func (t *flights) do(ctx context.Context, key string, op opKind, work func(*flight)) (f *flight, how joined, err error) {
	for {
		t.mu.Lock()
		if t.closing {
			t.mu.Unlock()
			return nil, ledFlight, ErrClosed
		}
		cur := t.m[key]
		if cur == nil {
			f = &flight{op: op, ready: make(chan struct{}), done: make(chan struct{})}
			if t.m == nil {
				t.m = map[string]*flight{}
			}
			t.m[key] = f
			t.running++
			if op == opRelay {
				t.relaying++
			}
			t.mu.Unlock()
			t.workers.start(func() { t.run(key, f, work) })
			return f, ledFlight, wait(ctx, f.ready)
		}
		t.mu.Unlock()
		if cur.op == op && !cur.isAnswered() {
			return cur, sharedFlight, wait(ctx, cur.ready)
		}
		// A flight of another op, or one that already answered and is
		// writing its record: this call started after that answer, so
		// another process may have acted on the ID since. It decides
		// from the store like any new call, once the record is written.
		if err := wait(ctx, cur.done); err != nil {
			return nil, ledFlight, err
		}
	}
}

func (t *flights) run(key string, f *flight, work func(*flight)) {
	work(f)
	f.answer()
	if !f.later {
		t.finish(key, f)
	}
}

// finish removes f, answered, from the table once its work is over.
func (t *flights) finish(key string, f *flight) {
	t.mu.Lock()
	delete(t.m, key)
	t.running--
	if f.op == opRelay {
		t.relaying--
	}
	if t.running == 0 {
		for _, ch := range t.idle {
			close(ch)
		}
		t.idle = nil
	}
	if t.running == t.relaying {
		for _, ch := range t.idleButRelay {
			close(ch)
		}
		t.idleButRelay = nil
	}
	t.mu.Unlock()
	close(f.done)
}

// close refuses new flights and returns a channel closed once none runs
// but the relay's, which the relay's drain bounds (relay.close).
func (t *flights) close() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closing = true
	ch := make(chan struct{})
	if t.running == t.relaying {
		close(ch)
	} else {
		t.idleButRelay = append(t.idleButRelay, ch)
	}
	return ch
}

// quiet returns a channel closed once no flight runs.
func (t *flights) quiet() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch := make(chan struct{})
	if t.running == 0 {
		close(ch)
	} else {
		t.idle = append(t.idle, ch)
	}
	return ch
}

// settled returns once no flight of key runs (one answered and still
// recording its outcome included), or ctx's error if ctx ends first.
func (t *flights) settled(ctx context.Context, key string) error {
	for {
		t.mu.Lock()
		cur := t.m[key]
		t.mu.Unlock()
		if cur == nil {
			return nil
		}
		if err := wait(ctx, cur.done); err != nil {
			return err
		}
	}
}

// isClosed reports whether close was called.
func (t *flights) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closing
}

// inFlight returns how many flights are running.
func (t *flights) inFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.running
}

// inFlightButRelay returns how many flights other than the relay's are
// running.
func (t *flights) inFlightButRelay() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.running - t.relaying
}

// wait returns nil once ch is closed, or ctx's error if ctx ends first.
func wait(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	default:
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
