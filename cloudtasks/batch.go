package cloudtasks

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxBatch is the most tasks one BatchCreateTasks request carries, the
// service's limit.
const maxBatch = 100

// DefaultBatchInFlight is the default of Config.BatchInFlight.
const DefaultBatchInFlight = 4

// errUnbatched tells a waiting call to make its own CreateTask call: the
// batch it was in could not say what happened to it.
var errUnbatched = errors.New("batch unavailable")

// batcher coalesces create calls into BatchCreateTasks requests per queue,
// the way a group commit coalesces appends.
//
//   - A call to an idle queue goes at once, alone, as a plain CreateTask:
//     a lone caller pays nothing.
//   - Calls that arrive while a request is in flight wait and form the next
//     request, up to maxBatch, which starts when a request answers.
//   - The callers a shared request answered come back together, one after
//     another, with their next calls. The queue expects them: until all of
//     them are back, but no longer than the shorter of the request's round
//     trip and twice the time the previous group took to come back,
//     arrivals gather instead of the first going alone and the rest
//     waiting a round trip behind it. The
//     gathered request goes even while others are in flight, up to
//     Config.BatchInFlight requests per queue.
//
// There is no fixed linger: every wait is bounded by what the queue
// observed, a request's round trip or its callers' return.
type batcher struct {
	d      *Dispatcher
	limit  int // requests in flight per queue
	mu     sync.Mutex
	queues map[string]*queueBatch
	off    atomic.Bool // set once the service showed it cannot batch
	once   sync.Once
}

// queueBatch is one queue's state, guarded by batcher.mu.
type queueBatch struct {
	parent  string
	sending int          // requests in flight
	waiting []*batchItem // calls for the next request

	// expect counts the callers of answered shared requests not yet back;
	// it is forgotten at until. answered is when the last one answered and
	// window how long its callers took to come back the last time all of
	// them did (0 until then).
	expect   int
	until    time.Time
	answered time.Time
	window   time.Duration
	// timer flushes the gathered calls at until. The window is measured
	// in real time, not on Config.Clock: it follows the service's round
	// trips, and a test's fake clock would never end it.
	timer *time.Timer
}

// batchItem is one call in a batch; err is its own answer.
type batchItem struct {
	ctx  context.Context
	key  string
	req  *cloudtaskspb.CreateTaskRequest
	err  error
	done chan struct{}
}

func newBatcher(d *Dispatcher, limit int) *batcher {
	return &batcher{d: d, limit: limit, queues: map[string]*queueBatch{}}
}

// create makes req's create call, alone or in a shared request, and
// returns this call's own answer: nil, or a status error of its index.
func (b *batcher) create(ctx context.Context, key string, req *cloudtaskspb.CreateTaskRequest) error {
	if b.off.Load() {
		return b.d.createOne(ctx, key, req)
	}
	now := time.Now()
	b.mu.Lock()
	q := b.queues[req.Parent]
	if q == nil {
		q = &queueBatch{parent: req.Parent}
		b.queues[req.Parent] = q
	}
	gathered := false // this call is the last of the callers expected
	if q.expect > 0 {
		if now.Before(q.until) {
			q.expect--
			if q.expect == 0 {
				gathered = true
				q.window = now.Sub(q.answered)
			}
		} else {
			q.expect = 0
		}
	}
	if q.expect == 0 && q.sending == 0 || gathered && q.sending < b.limit {
		// Lead a request: alone at an idle queue, or with the calls that
		// gathered for it.
		it := &batchItem{ctx: ctx, key: key, req: req}
		items := append(q.take(maxBatch-1), it)
		q.sending++
		b.mu.Unlock()
		if len(items) == 1 {
			start := time.Now()
			err := b.d.createOne(ctx, key, req)
			b.finish(q, items, start)
			return err
		}
		b.run(q, items)
		if errors.Is(it.err, errUnbatched) {
			return b.d.createOne(ctx, key, req)
		}
		return it.err
	}
	it := &batchItem{ctx: ctx, key: key, req: req, done: make(chan struct{})}
	q.waiting = append(q.waiting, it)
	switch {
	case len(q.waiting) >= maxBatch && q.sending < b.limit:
		b.startLocked(q)
	case q.expect > 0 && q.timer == nil:
		q.timer = time.AfterFunc(q.until.Sub(now), func() { b.expire(q) })
	}
	b.mu.Unlock()
	// A call that stops waiting may still be sent: the task name makes
	// that harmless.
	if err := wait(ctx, it.done); err != nil {
		return err
	}
	if errors.Is(it.err, errUnbatched) {
		return b.d.createOne(ctx, key, req)
	}
	return it.err
}

// take removes and returns up to n waiting calls, and stops the gathering
// timer when none is left.
func (q *queueBatch) take(n int) []*batchItem {
	n = min(n, len(q.waiting))
	items := make([]*batchItem, n, n+1)
	copy(items, q.waiting)
	q.waiting = append(q.waiting[:0], q.waiting[n:]...)
	if len(q.waiting) == 0 && q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	return items
}

// startLocked sends the waiting calls (up to maxBatch) in a request of
// their own. b.mu is held.
func (b *batcher) startLocked(q *queueBatch) {
	items := q.take(maxBatch)
	q.sending++
	go b.run(q, items)
}

// expire ends the wait for callers that did not come back in time and
// sends what gathered.
func (b *batcher) expire(q *queueBatch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q.timer = nil
	q.expect = 0
	if len(q.waiting) > 0 && q.sending < b.limit {
		b.startLocked(q)
	}
}

// run sends items in one request, answers every waiting item, and
// settles the queue.
func (b *batcher) run(q *queueBatch, items []*batchItem) {
	start := time.Now()
	b.send(q.parent, items)
	for _, it := range items {
		if it.done != nil {
			close(it.done)
		}
	}
	b.finish(q, items, start)
}

// finish settles the queue after a request of items, started at start,
// answered: a shared request's callers are expected back, and waiting
// calls that expect nobody go.
func (b *batcher) finish(q *queueBatch, items []*batchItem, start time.Time) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	q.sending--
	// Wait for the callers no longer than they took the last time, twice
	// over, and never longer than a round trip: past that, going alone is
	// cheaper.
	win := now.Sub(start)
	if q.window > 0 {
		win = min(win, 2*q.window)
	}
	if len(items) > 1 && win > 0 {
		q.expect += len(items)
		q.answered, q.until = now, now.Add(win)
		if q.timer != nil {
			q.timer.Stop()
			q.timer = nil
		}
		if len(q.waiting) > 0 {
			q.timer = time.AfterFunc(win, func() { b.expire(q) })
		}
		return
	}
	if q.expect == 0 && len(q.waiting) > 0 && q.sending < b.limit {
		b.startLocked(q)
	}
}

// send makes one request for items and sets each item's answer: a plain
// CreateTask for a single item, else one BatchCreateTasks.
func (b *batcher) send(parent string, items []*batchItem) {
	if len(items) == 1 {
		it := items[0]
		it.err = b.d.createOne(it.ctx, it.key, it.req)
		return
	}
	reqs := make([]*cloudtaskspb.CreateTaskRequest, len(items))
	for i, it := range items {
		reqs[i] = it.req
	}
	// The request serves every item; it runs under the first one's work
	// context, which no caller's cancellation ends, in a span of its own
	// linked to every item's.
	ctx, span := b.d.startBatch(parent, items)
	var sent error
	failures := 0
	defer func() { endBatch(span, sent, failures) }()
	op, err := b.d.client.BatchCreateTasks(ctx, &cloudtaskspb.BatchCreateTasksRequest{Parent: parent, Requests: reqs})
	sent = err
	code := codeOf(err)
	b.d.m.call(ctx, "BatchCreateTasks", code)
	switch {
	case code == codes.Unimplemented:
		b.stop("the service does not implement BatchCreateTasks", err)
		setAll(items, errUnbatched)
		return
	case err != nil:
		// The whole request failed: each call retries or fails on its own
		// by the code, as after its own CreateTask.
		setAll(items, err)
		return
	case !op.Done():
		// The tasks may or may not exist yet; CreateTask under the same
		// names finds out without waiting for the operation.
		b.stop("the BatchCreateTasks operation was not done at once", nil)
		setAll(items, errUnbatched)
		return
	}
	meta, err := op.Metadata()
	if err != nil || meta == nil {
		b.stop("the BatchCreateTasks operation carried no readable metadata", err)
		setAll(items, errUnbatched)
		return
	}
	failed := meta.GetFailedRequests()
	failures = len(failed)
	for i, it := range items {
		if st := failed[int32(i)]; st != nil {
			it.err = status.ErrorProto(st)
		}
	}
}

// stop turns batching off for the dispatcher's life, saying why once.
func (b *batcher) stop(reason string, err error) {
	b.off.Store(true)
	b.once.Do(func() {
		b.d.log.Warn("batching off: falling back to one CreateTask per call", "reason", reason, "err", err)
	})
}

func setAll(items []*batchItem, err error) {
	for _, it := range items {
		it.err = err
	}
}
