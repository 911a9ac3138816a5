package cloudtasks

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MaxBatch is the most tasks one BatchCreateTasks request carries, the
// service's limit.
const MaxBatch = 100

// errUnbatched tells a waiting call to make its own CreateTask call: the
// batch it was in could not say what happened to it.
var errUnbatched = errors.New("batch unavailable")

// batcher coalesces create calls into BatchCreateTasks requests per queue,
// the way a group commit coalesces appends: a call to an idle queue goes
// at once, alone (as a plain CreateTask, so a lone caller pays nothing);
// calls that arrive while a request is in flight wait and form the next
// request, up to MaxBatch. There is no linger.
type batcher struct {
	d      *Dispatcher
	mu     sync.Mutex
	queues map[string]*queueBatch
	off    atomic.Bool // set once the service showed it cannot batch
	once   sync.Once
}

// queueBatch is one queue's state: whether a request is in flight, and
// the calls waiting for the next one.
type queueBatch struct {
	busy bool
	next []*batchItem
}

// batchItem is one call waiting in a batch; err is its own answer.
type batchItem struct {
	ctx  context.Context
	key  string
	req  *cloudtaskspb.CreateTaskRequest
	err  error
	done chan struct{}
}

func newBatcher(d *Dispatcher) *batcher {
	return &batcher{d: d, queues: map[string]*queueBatch{}}
}

// create makes req's create call, alone or in a shared request, and
// returns this call's own answer: nil, or a status error of its index.
func (b *batcher) create(ctx context.Context, key string, req *cloudtaskspb.CreateTaskRequest) error {
	if b.off.Load() {
		return b.d.createOne(ctx, key, req)
	}
	b.mu.Lock()
	q := b.queues[req.Parent]
	if q == nil {
		q = &queueBatch{}
		b.queues[req.Parent] = q
	}
	if !q.busy {
		q.busy = true
		b.mu.Unlock()
		err := b.d.createOne(ctx, key, req)
		b.next(req.Parent)
		return err
	}
	it := &batchItem{ctx: ctx, key: key, req: req, done: make(chan struct{})}
	q.next = append(q.next, it)
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

// next starts the queue's next request with the calls waiting, or marks
// the queue idle.
func (b *batcher) next(parent string) {
	b.mu.Lock()
	q := b.queues[parent]
	if len(q.next) == 0 {
		q.busy = false
		b.mu.Unlock()
		return
	}
	n := min(len(q.next), MaxBatch)
	items := q.next[:n:n]
	q.next = q.next[n:]
	b.mu.Unlock()
	go func() {
		b.send(parent, items)
		for _, it := range items {
			close(it.done)
		}
		b.next(parent)
	}()
}

// send makes one BatchCreateTasks request for items and sets each item's
// answer.
func (b *batcher) send(parent string, items []*batchItem) {
	if len(items) == 1 {
		items[0].err = errUnbatched
		return
	}
	reqs := make([]*cloudtaskspb.CreateTaskRequest, len(items))
	for i, it := range items {
		reqs[i] = it.req
	}
	// The request serves every item; it runs under the first one's work
	// context, which no caller's cancellation ends.
	ctx := items[0].ctx
	op, err := b.d.client.BatchCreateTasks(ctx, &cloudtaskspb.BatchCreateTasksRequest{Parent: parent, Requests: reqs})
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
