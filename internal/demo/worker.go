package demo

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/ctdispatch/ctdispatch/cloudtasks/worker"
)

// Worker is the HTTP target of the demo: the cloudtasks/worker package as
// a user's service would run it, with the in-memory inbox (one process, no
// guarantee across processes or restarts; a service uses
// worker.NewSQLInbox) and token verification off, because the demo's
// tasks carry no OIDC token. It checks that every request's
// Idempotency-Key names the task it came in and does each key's work once,
// however often the key is delivered; it counts what it answered.
type Worker struct {
	// FailAfterWork, when it returns true for a delivery, makes the first
	// delivery of its key do the work and then answer 503 in place of the
	// worker's 200, as a reply lost after the work would. Cloud Tasks
	// delivers the task again, and the inbox acknowledges the repeat
	// without doing the work twice.
	FailAfterWork func(*worker.Delivery) bool

	w *worker.Worker

	mu                 sync.Mutex
	done, dup, refused int
	loseReply          map[string]bool // keys whose "done" answer is replaced by 503
}

// NewWorker returns a worker that has seen nothing. Its library logs go
// to logger (nil: discarded).
func NewWorker(logger *slog.Logger) (*Worker, error) {
	dw := &Worker{loseReply: make(map[string]bool)}
	w, err := worker.New(context.Background(), &worker.Config{
		InsecureSkipVerify: true,
		Inbox:              worker.NewMemoryInbox(),
		Logger:             logger,
	}, dw.work)
	if err != nil {
		return nil, err
	}
	dw.w = w
	return dw, nil
}

// work is the demo's piece of work: nothing to do but to note the keys
// whose reply is to be lost.
func (dw *Worker) work(_ context.Context, d *worker.Delivery) error {
	if dw.FailAfterWork != nil && dw.FailAfterWork(d) {
		dw.mu.Lock()
		dw.loseReply[d.ID.String()] = true
		dw.mu.Unlock()
	}
	return nil
}

// ServeHTTP passes the request to the worker and counts its answer, whose
// body names the outcome ("done", "duplicate", "rejected", …).
func (dw *Worker) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	dw.w.ServeHTTP(rec, r)
	outcome := worker.Outcome(strings.TrimSpace(rec.Body.String()))
	key := r.Header.Get(worker.HeaderIdempotencyKey)
	dw.mu.Lock()
	lose := outcome == worker.OutcomeDone && dw.loseReply[key]
	switch outcome {
	case worker.OutcomeDone:
		dw.done++
	case worker.OutcomeDuplicate:
		dw.dup++
	case worker.OutcomeRejected:
		dw.refused++
	}
	dw.mu.Unlock()
	if lose {
		http.Error(rw, "work done, reply lost", http.StatusServiceUnavailable)
		return
	}
	for k, v := range rec.Header() {
		rw.Header()[k] = v
	}
	rw.WriteHeader(rec.Code)
	_, _ = rw.Write(rec.Body.Bytes())
}

// WorkerStats is what the worker saw.
type WorkerStats struct {
	// Deliveries counts requests with valid headers, repeats included.
	Deliveries int `json:"deliveries"`
	// Unique counts distinct idempotency keys: the work actually done.
	Unique int `json:"unique"`
	// Repeats counts deliveries of a key already done, which the worker
	// acknowledged without doing the work again.
	Repeats int `json:"repeats"`
	// Rejected counts requests with missing or inconsistent headers.
	Rejected int `json:"rejected"`
}

// Stats returns a snapshot of what the worker saw.
func (dw *Worker) Stats() WorkerStats {
	dw.mu.Lock()
	defer dw.mu.Unlock()
	return WorkerStats{Deliveries: dw.done + dw.dup, Unique: dw.done, Repeats: dw.dup, Rejected: dw.refused}
}
