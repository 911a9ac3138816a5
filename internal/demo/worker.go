package demo

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/ctdispatch/ctdispatch/naming"
)

// Worker is the HTTP target of the demo: it stands for a user's service and
// does what such a service should do with ctdispatch's headers. It checks
// that every request carries an Idempotency-Key that names the task it came
// in (the task name must be the key's Cloud Tasks ID) and performs each
// key's work once, however often the key is delivered.
type Worker struct {
	// FailAfterWork, when it returns true for a request, makes the first
	// delivery of its key do the work and then answer 503, as a worker that
	// crashes before replying would. Cloud Tasks delivers the task again, and
	// the worker acknowledges the repeat without doing the work twice.
	FailAfterWork func(*http.Request) bool

	mu         sync.Mutex
	done       map[string]int // deliveries seen per idempotency key
	deliveries int
	rejected   int
}

// NewWorker returns a worker that has seen nothing.
func NewWorker() *Worker { return &Worker{done: make(map[string]int)} }

// ServeHTTP answers 200 for a valid delivery (first or repeated) and 400 for
// a request whose headers do not fit together, which Cloud Tasks would not
// retry forever but the demo reports.
func (w *Worker) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if err := checkDelivery(key, r.Header.Get("X-CloudTasks-TaskName")); err != nil {
		w.mu.Lock()
		w.rejected++
		w.mu.Unlock()
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	w.deliveries++
	w.done[key]++
	first := w.done[key] == 1
	w.mu.Unlock()
	if first && w.FailAfterWork != nil && w.FailAfterWork(r) {
		http.Error(rw, "work done, reply lost", http.StatusServiceUnavailable)
		return
	}
	rw.WriteHeader(http.StatusOK)
}

// checkDelivery verifies that the idempotency key is an internal ID and that
// the task delivering it is the one that ID names.
func checkDelivery(key, taskName string) error {
	if key == "" {
		return fmt.Errorf("missing Idempotency-Key header")
	}
	want, err := naming.CloudTaskID(key)
	if err != nil {
		return fmt.Errorf("Idempotency-Key: %w", err)
	}
	if taskName != want {
		return fmt.Errorf("task %q delivered key %q, whose task is %q", taskName, key, want)
	}
	return nil
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
func (w *Worker) Stats() WorkerStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return WorkerStats{
		Deliveries: w.deliveries,
		Unique:     len(w.done),
		Repeats:    w.deliveries - len(w.done),
		Rejected:   w.rejected,
	}
}
