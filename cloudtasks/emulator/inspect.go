package emulator

import (
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator/emuproto"
)

// withInspection serves emuproto.InspectPath and hands every other request to next.
func (s *Server) withInspection(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+emuproto.InspectPath, s.serveInspection)
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
func (s *Server) inspect(queue, task string, limit int) emuproto.Inspection {
	s.mu.Lock()
	now := s.clock.Now()
	ins := emuproto.Inspection{Now: now, Queues: make([]emuproto.QueueLoad, 0, len(s.queues))}
	nowNanos := now.UnixNano()
	for name, q := range s.queues {
		load := emuproto.QueueLoad{Name: name, Tasks: len(q.tasks), Running: int(q.running)}
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
	ins.Deliveries = make([]emuproto.DeliveryRecord, len(picked))
	for i, d := range picked {
		ins.Deliveries[i] = emuproto.DeliveryRecord{
			Queue: d.Queue, Task: d.Task, Attempt: d.Attempt, Method: d.Method, URL: d.URL,
			Header: redact(d.Header), BodyBytes: len(d.Body),
			ScheduleTime: d.ScheduleTime, DispatchTime: d.DispatchTime, ResponseTime: d.ResponseTime,
			StatusCode: d.StatusCode, Err: d.Err, Outcome: d.Outcome, Fault: string(d.Fault),
		}
	}
	return ins
}

// shownHeaders are the request headers whose values inspection shows as
// sent: ones that carry no secret and say what a delivery was (the
// service's X-CloudTasks-* and ctdispatch's X-Ctdispatch-* by prefix).
// Every other value is replaced by emuproto.RedactedValue: a task may
// carry a credential under any name (Authorization, Cookie, X-Api-Key),
// and the inspection is read by tools that show it on a page.
var shownHeaders = map[string]bool{
	"Content-Type":    true,
	"User-Agent":      true,
	"Traceparent":     true,
	"Tracestate":      true,
	"Idempotency-Key": true,
}

var shownHeaderPrefixes = []string{"X-Cloudtasks-", "X-Ctdispatch-"}

// redact copies h with the value of every header not known to be harmless
// replaced.
func redact(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, v := range h {
		if shown(http.CanonicalHeaderKey(k)) {
			out[k] = slices.Clone(v)
		} else {
			out[k] = []string{emuproto.RedactedValue}
		}
	}
	return out
}

func shown(key string) bool {
	if shownHeaders[key] {
		return true
	}
	for _, p := range shownHeaderPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}
