package emulator

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// InspectPath serves an Inspection as JSON on the emulator's HTTP server:
// a read-only view of the queues' load and the recent delivery attempts,
// for tools in another process (such as ctdispatch console) that the
// Cloud Tasks API cannot tell. Query parameter "limit" bounds the
// deliveries returned (newest first; default and maximum
// DefaultDeliveryLogLimit), "queue" keeps only one queue's attempts, and
// "task" only one task's.
const InspectPath = "/emulator/v1/inspect"

// RedactedValue replaces the value of a header that carries a credential
// (Authorization) wherever the emulator shows a request.
const RedactedValue = "[redacted]"

// Inspection is what InspectPath answers.
type Inspection struct {
	// Now is the emulator's clock when the answer was made.
	Now time.Time `json:"now"`
	// Queues holds the load of every queue, sorted by name.
	Queues []QueueLoad `json:"queues"`
	// Deliveries holds the selected attempts, newest first.
	Deliveries []DeliveryRecord `json:"deliveries"`
}

// QueueLoad counts a queue's tasks by what they are doing.
type QueueLoad struct {
	// Name is the queue's full resource name.
	Name string `json:"name"`
	// Tasks counts every stored task.
	Tasks int `json:"tasks"`
	// Waiting counts tasks that are due but not yet dispatched (held back
	// by rate limits, a paused queue, or a loop that has not run yet).
	Waiting int `json:"waiting"`
	// Scheduled counts tasks whose schedule time is still ahead.
	Scheduled int `json:"scheduled"`
	// Running counts attempts in flight.
	Running int `json:"running"`
}

// DeliveryRecord is a Delivery as InspectPath shows it: the Authorization
// header's value replaced by RedactedValue and the body by its size.
type DeliveryRecord struct {
	// Queue and Task are full resource names.
	Queue string `json:"queue"`
	Task  string `json:"task"`
	// Attempt counts from 1.
	Attempt int32 `json:"attempt"`
	// Method, URL and Header are the request as sent, credentials redacted.
	Method string      `json:"method"`
	URL    string      `json:"url"`
	Header http.Header `json:"header"`
	// BodyBytes is the size of the request body.
	BodyBytes int `json:"body_bytes"`
	// ScheduleTime, DispatchTime and ResponseTime come from the clock.
	ScheduleTime time.Time `json:"schedule_time"`
	DispatchTime time.Time `json:"dispatch_time"`
	ResponseTime time.Time `json:"response_time"`
	// StatusCode is the worker's HTTP status, 0 when there was no response.
	StatusCode int `json:"status_code"`
	// Err describes a failure without a response.
	Err string `json:"error,omitempty"`
	// Outcome is one of the Outcome… constants.
	Outcome string `json:"outcome"`
}

// withInspection serves InspectPath and hands every other request to next.
func (s *Server) withInspection(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+InspectPath, s.serveInspection)
	mux.Handle("/", next)
	return mux
}

func (s *Server) serveInspection(w http.ResponseWriter, r *http.Request) {
	limit := DefaultDeliveryLogLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, "limit "+strconv.Quote(v)+" is not a whole number of 0 or more", http.StatusBadRequest)
			return
		}
		limit = min(n, DefaultDeliveryLogLimit)
	}
	ins := s.inspect(r.URL.Query().Get("queue"), r.URL.Query().Get("task"), limit)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ins)
}

// inspect counts under the lock and copies the selected deliveries; the
// redaction and sorting happen outside it.
func (s *Server) inspect(queue, task string, limit int) Inspection {
	s.mu.Lock()
	now := s.clock.Now()
	ins := Inspection{Now: now, Queues: make([]QueueLoad, 0, len(s.queues))}
	nowNanos := now.UnixNano()
	for name, q := range s.queues {
		load := QueueLoad{Name: name, Tasks: len(q.tasks), Running: int(q.running)}
		for _, t := range q.pending {
			if t.schedule > nowNanos {
				load.Scheduled++
			} else {
				load.Waiting++
			}
		}
		ins.Queues = append(ins.Queues, load)
	}
	var picked []Delivery
	for i := len(s.deliveries) - 1; i >= 0 && len(picked) < limit; i-- {
		d := s.deliveries[i]
		if (queue == "" || d.Queue == queue) && (task == "" || d.Task == task) {
			picked = append(picked, d)
		}
	}
	s.mu.Unlock()
	sort.Slice(ins.Queues, func(i, j int) bool { return ins.Queues[i].Name < ins.Queues[j].Name })
	ins.Deliveries = make([]DeliveryRecord, len(picked))
	for i, d := range picked {
		ins.Deliveries[i] = DeliveryRecord{
			Queue: d.Queue, Task: d.Task, Attempt: d.Attempt, Method: d.Method, URL: d.URL,
			Header: redact(d.Header), BodyBytes: len(d.Body),
			ScheduleTime: d.ScheduleTime, DispatchTime: d.DispatchTime, ResponseTime: d.ResponseTime,
			StatusCode: d.StatusCode, Err: d.Err, Outcome: d.Outcome,
		}
	}
	return ins
}

// redact copies h with the value of every credential header replaced.
func redact(h http.Header) http.Header {
	out := h.Clone()
	for k := range out {
		if strings.EqualFold(k, "Authorization") || strings.EqualFold(k, "Proxy-Authorization") {
			out[k] = []string{RedactedValue}
		}
	}
	return out
}
