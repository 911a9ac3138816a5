package chaos

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// checkerWorld is a small run the checker tests change one thing in: a
// dispatch and a retry timer that took effect, a held heartbeat and a
// cancelled dispatch, each answered once.
type checkerWorld struct {
	plan    []e2eItem
	q       e2eRequests
	history []e2eEvent
	final   e2eFinal
}

func newCheckerWorld() *checkerWorld {
	w := &checkerWorld{
		plan:  []e2eItem{{0, itemDispatch}, {1, itemRetry}, {2, itemHeld}, {3, itemCancel}},
		q:     e2eRequests{run: "r", url: e2eURL, account: e2eAccount, base: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)},
		final: e2eFinal{records: map[string]outbox.Record{}, tasks: map[string][]string{}, effects: map[string]int{}},
	}
	for _, it := range w.plan {
		nid := w.q.id(it)
		id, cid := nid.String(), nid.CloudTaskID()
		w.history = append(w.history,
			e2eEvent{Proc: "o1.0", Hop: hopOrchestrator, Op: "dispatch", Phase: "call", ID: id},
			e2eEvent{Proc: "o1.0", Hop: hopOrchestrator, Op: "dispatch", Phase: "answer", ID: id, Outcome: "created"})
		status := outbox.StatusCreated
		switch {
		case it.wantsEffect():
			w.history = append(w.history,
				e2eEvent{Proc: "w1.0", Hop: hopWorker, Op: "inbox", ID: id, Outcome: "done"},
				e2eEvent{Proc: "w1.0", Hop: hopWorker, Op: "effect", ID: id})
			w.final.effects[id] = 1
			w.final.deliveries = append(w.final.deliveries, emulator.Delivery{Queue: queuePath, Task: queuePath + "/tasks/" + cid, Outcome: emulator.OutcomeSucceeded, StatusCode: 200})
			w.final.deliveryRows = append(w.final.deliveryRows, outbox.Record{ID: outbox.DeliveryID(nid, "a"), Status: outbox.StatusDone, Delivery: outbox.DeliveryFields{HTTPStatus: 200}})
		case it.Kind == itemHeld:
			w.final.tasks[cid] = []string{queuePath}
		default:
			w.history = append(w.history,
				e2eEvent{Proc: "o1.0", Hop: hopOrchestrator, Op: "cancel", Phase: "call", ID: id},
				e2eEvent{Proc: "o1.0", Hop: hopOrchestrator, Op: "cancel", Phase: "answer", ID: id, Outcome: "deleted"})
			status = outbox.StatusCancelled
		}
		w.final.records[id] = outbox.Record{ID: id, Status: status, Queue: queuePath}
	}
	return w
}

// withheldPastDeadline makes the world's dispatch a delivery whose first
// attempt's 2xx the transport withheld past the dispatch deadline: the
// emulator logged first, then a second attempt with reason, which the
// worker answered as a duplicate; the fault's event ends the history.
func withheldPastDeadline(w *checkerWorld, first emulator.Delivery, reason string) {
	id := w.q.id(w.plan[0])
	header := func(h ...string) http.Header {
		out := http.Header{"Idempotency-Key": {id.String()}}
		if len(h) == 2 && h[1] != "" {
			out.Set(h[0], h[1])
		}
		return out
	}
	first.Task, first.Queue, first.Header = w.final.deliveries[0].Task, w.final.deliveries[0].Queue, header()
	w.final.deliveries[0].Attempt, w.final.deliveries[0].Header = 2, header("X-CloudTasks-TaskRetryReason", reason)
	w.final.deliveries = append([]emulator.Delivery{first}, w.final.deliveries...)
	w.final.deliveryRows = append(w.final.deliveryRows, outbox.Record{ID: outbox.DeliveryID(id, "b"), Status: outbox.StatusDuplicate, Delivery: outbox.DeliveryFields{HTTPStatus: 200}})
	w.final.extra2xx = 1
	w.history = append(w.history, e2eEvent{Proc: "", Hop: hopEmulator, Op: "fault", ID: id.String(), Attempt: 1, Status: 200, Detail: faultDeadline})
}

func TestCheckE2E(t *testing.T) {
	t.Parallel()
	dispatchID := "dispatch:r:k00000:1"
	tests := []struct {
		name   string
		change func(w *checkerWorld)
		want   e2eReport
	}{
		{"all held", func(*checkerWorld) {}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 2, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{}, TimersFired: 1, TimersHeld: 1}},
		{"lost effect", func(w *checkerWorld) {
			delete(w.final.effects, dispatchID)
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 1, Lost: 1, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{}, TimersFired: 1, TimersHeld: 1,
			Problems: []string{"lost effect (acknowledged, no effect): 1 (e.g. dispatch:r:k00000:1)"}}},
		{"duplicate effect, applied outside the inbox", func(w *checkerWorld) {
			w.final.effects[dispatchID] = 2
			w.history = append(w.history, e2eEvent{Proc: "w2.0", Hop: hopWorker, Op: "effect", ID: dispatchID})
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 3, Duplicate: 1, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{}, TimersFired: 1, TimersHeld: 1,
			Problems: []string{"duplicate effect: 1 (e.g. dispatch:r:k00000:1)", "workers' inbox outcomes done differ from their effects: 1 (e.g. dispatch:r:k00000:1)"}}},
		{"a call its process did not live to answer, resolved", func(w *checkerWorld) {
			w.history = append(w.history, e2eEvent{Proc: "o2.0", Hop: hopOrchestrator, Op: "dispatch", Phase: "call", ID: dispatchID})
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 2, Indeterminate: 1, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{"task exists once (created)": 1}, TimersFired: 1, TimersHeld: 1}},
		{"an indeterminate call left pending", func(w *checkerWorld) {
			w.history = append(w.history, e2eEvent{Proc: "o2.0", Hop: hopOrchestrator, Op: "dispatch", Phase: "answer", ID: dispatchID, Err: "outcome indeterminate"})
			w.final.records[dispatchID] = outbox.Record{ID: dispatchID, Status: outbox.StatusPending, Queue: queuePath}
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 2, Indeterminate: 1, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{"unresolved (pending)": 1}, TimersFired: 1, TimersHeld: 1,
			Problems: []string{"indeterminate call still unresolved: 1 (e.g. dispatch:r:k00000:1)", "outbox record not created or already_existed: 1 (e.g. dispatch:r:k00000:1)"}}},
		{"held timer's task gone", func(w *checkerWorld) {
			w.final.tasks = map[string][]string{}
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 2, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{}, TimersFired: 1,
			Problems: []string{"held timer's task missing: 1 (e.g. timer:heartbeat:r:k00002:1795784400)"}}},
		{"a 2xx the emulator never saw and no one explains", func(w *checkerWorld) {
			w.final.deliveryRows = append(w.final.deliveryRows, outbox.Record{ID: outbox.DeliveryID(w.q.id(w.plan[0]), "b"), Status: outbox.StatusDuplicate, Delivery: outbox.DeliveryFields{HTTPStatus: 200}})
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 2, Absorbed: 1, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{}, TimersFired: 1, TimersHeld: 1,
			Problems: []string{"deliveries table has 3 2xx answers (0 by killed workers); the emulator saw 2, its transport kept 0 more from it and answered 0 itself, and the workers could not record 0"}}},
		{"the same 2xx kept from the emulator by a doubled delivery", func(w *checkerWorld) {
			w.final.deliveryRows = append(w.final.deliveryRows, outbox.Record{ID: outbox.DeliveryID(w.q.id(w.plan[0]), "b"), Status: outbox.StatusDuplicate, Delivery: outbox.DeliveryFields{HTTPStatus: 200}})
			w.final.extra2xx = 1
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 2, Absorbed: 1, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{}, TimersFired: 1, TimersHeld: 1}},
		{"a 2xx withheld past the dispatch deadline, recorded as such and delivered again", func(w *checkerWorld) {
			withheldPastDeadline(w, emulator.Delivery{Attempt: 1, Err: "dispatch deadline exceeded of 15s", Outcome: emulator.OutcomeRetry}, "DEADLINE_EXCEEDED")
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 2, Absorbed: 1, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{}, TimersFired: 1, TimersHeld: 1, PastDeadline: 1}},
		{"a 2xx withheld past the dispatch deadline that the emulator counted as a success", func(w *checkerWorld) {
			withheldPastDeadline(w, emulator.Delivery{Attempt: 1, StatusCode: 200, Outcome: emulator.OutcomeSucceeded}, "")
			w.final.extra2xx = 0
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 2, Absorbed: 1, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{}, TimersFired: 1, TimersHeld: 1,
			Problems: []string{"a 2xx withheld past the dispatch deadline that the emulator did not record as a deadline failure, retried: 1 (e.g. dispatch:r:k00000:1)"}}},
		{"a redelivery after a deadline that does not say why", func(w *checkerWorld) {
			withheldPastDeadline(w, emulator.Delivery{Attempt: 1, Err: "dispatch deadline exceeded of 15s", Outcome: emulator.OutcomeRetry}, "NO_RESPONSE")
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 2, Absorbed: 1, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{}, TimersFired: 1, TimersHeld: 1, PastDeadline: 1,
			Problems: []string{"the attempt after a deadline failure does not give DEADLINE_EXCEEDED as its retry reason: 1 (e.g. dispatch:r:k00000:1)"}}},
		{"a worker slower than the dispatch deadline, besides the withheld 2xx", func(w *checkerWorld) {
			withheldPastDeadline(w, emulator.Delivery{Attempt: 1, Err: "dispatch deadline exceeded of 15s", Outcome: emulator.OutcomeRetry}, "DEADLINE_EXCEEDED")
			id := w.q.id(w.plan[1])
			w.final.deliveries[2].Attempt, w.final.deliveries[2].Header = 2, http.Header{"Idempotency-Key": {id.String()}}
			w.final.deliveries = append(w.final.deliveries, emulator.Delivery{Task: w.final.deliveries[2].Task, Queue: w.final.deliveries[2].Queue, Attempt: 1, Header: w.final.deliveries[2].Header,
				Err: "dispatch deadline exceeded of 15s", Outcome: emulator.OutcomeRetry})
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 2, Absorbed: 1, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{}, TimersFired: 1, TimersHeld: 1, PastDeadline: 2}},
		{"recorded in the redeployed queue, delivered from it", func(w *checkerWorld) {
			other := "projects/chaos/locations/local/queues/" + e2eRedeployQueue
			r := w.final.records[dispatchID]
			r.Queue = other
			w.final.records[dispatchID] = r
			w.final.deliveries[0].Queue, w.final.deliveries[0].Task = other, other+"/tasks/"+w.q.id(w.plan[0]).CloudTaskID()
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 2, Queues: map[string]int{queueID: 3, e2eRedeployQueue: 1}, Resolved: map[string]int{}, TimersFired: 1, TimersHeld: 1}},
		{"a repeat that made a second task in its own default queue", func(w *checkerWorld) {
			held := w.q.id(w.plan[2]).CloudTaskID()
			w.final.tasks[held] = append(w.final.tasks[held], "projects/chaos/locations/local/queues/"+e2eRedeployQueue)
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 2, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{}, TimersFired: 1, TimersHeld: 1,
			Problems: []string{"tasks of one ID in two queues: 1 (e.g. timer:heartbeat:r:k00002:1795784400)"}}},
		{"delivered from a queue the record does not name", func(w *checkerWorld) {
			other := "projects/chaos/locations/local/queues/" + e2eRedeployQueue
			w.final.deliveries[0].Queue = other
		}, e2eReport{Attempts: 4, Acknowledged: 4, Effects: 2, Queues: map[string]int{queueID: 4}, Resolved: map[string]int{}, TimersFired: 1, TimersHeld: 1,
			Problems: []string{"a task or delivery in a queue its record does not name: 1 (e.g. dispatch:r:k00000:1)"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newCheckerWorld()
			tt.change(w)
			require.Equal(t, tt.want, checkE2E(w.plan, w.q, w.history, w.final))
		})
	}
}

func TestE2EPlan(t *testing.T) {
	t.Parallel()
	plan := e2ePlan(1, 2000)
	kinds := map[string]int{}
	for _, it := range plan {
		kinds[it.Kind]++
	}
	// Seven in ten at once, the rest spread over the timers and cancels;
	// the same seed draws the same plan in every process.
	require.Equal(t, map[string]int{itemDispatch: 1398, itemRetry: 222, itemHeld: 85, itemCancel: 206, itemCancelTimer: 89}, kinds)
	require.Equal(t, plan, e2ePlan(1, 2000))
}
