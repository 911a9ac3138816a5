package chaos

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// e2eFinal is the state the e2e checker reads once the run has drained.
type e2eFinal struct {
	// records holds the latest outbox record of each dispatch and timer ID.
	records map[string]outbox.Record
	// deliveryRows holds the latest record of each delivery in the
	// workers' deliveries table.
	deliveryRows []outbox.Record
	// tasks holds the Cloud Tasks IDs of the tasks left in the emulator,
	// each with the queues (full names) that hold a task of that ID.
	tasks map[string][]string
	// deliveries is the emulator's delivery log.
	deliveries []emulator.Delivery
	// effects counts the effect rows per internal ID.
	effects map[string]int
	// extra2xx counts 2xx answers the emulator's transport kept from it;
	// dropped counts attempts it answered without a worker.
	extra2xx, dropped int
}

// e2eReport is what the checker found, in the manner of a queue checker:
// what was asked and acknowledged, what took effect, what was lost or
// doubled, and how every call without a clean answer resolved.
type e2eReport struct {
	Attempts     int `json:"attempts"`
	Acknowledged int `json:"acknowledged"`
	Effects      int `json:"effects"`
	Lost         int `json:"lost_effects"`
	Duplicate    int `json:"duplicate_effects"`
	// Absorbed counts deliveries the inbox answered as duplicates.
	Absorbed int `json:"duplicate_deliveries_absorbed"`
	// Indeterminate counts calls that got an error or no answer (their
	// process died); Resolved says how each ended, by the ID's final
	// record.
	Indeterminate int            `json:"indeterminate_calls"`
	Resolved      map[string]int `json:"resolved"`
	// TimersFired, TimersCancelled and TimersHeld count retry timers with
	// their effect, cancelled heartbeats and heartbeats still queued.
	TimersFired     int `json:"timers_fired"`
	TimersCancelled int `json:"timers_cancelled"`
	TimersHeld      int `json:"timers_held"`
	// PastDeadline counts attempts the emulator failed by their dispatch
	// deadline: those whose 2xx the transport withheld, and any a worker
	// took that long to answer (a slow machine may; Cloud Tasks then
	// retries, as the emulator does).
	PastDeadline int `json:"attempts_past_deadline"`
	// Queues counts the planned IDs by the queue (its ID) their record
	// names: a redeployed orchestrator records some in its own.
	Queues map[string]int `json:"records_by_queue"`
	// Problems lists every broken rule; empty means the run held.
	Problems []string `json:"problems,omitempty"`
}

// checkE2E checks a run's history and final state against its plan.
func checkE2E(plan []e2eItem, q e2eRequests, history []e2eEvent, f e2eFinal) e2eReport {
	rep := e2eReport{Attempts: len(plan), Resolved: map[string]int{}, Queues: map[string]int{}}
	problems := map[string][]string{} // rule -> example IDs
	problem := func(rule, id string) { problems[rule] = append(problems[rule], id) }

	acked := map[string]bool{}
	// What the workers said and did: inbox outcomes done, effects,
	// delivery records their outbox could not keep, split between the
	// processes the run killed (whose last deliveries may have committed
	// without a word, or been recorded without an answer) and the others.
	killed, killedUUID := map[string]bool{}, map[string]bool{}
	for _, ev := range history {
		if ev.Hop == hopWorker && ev.Op == "killed" {
			killed[ev.Proc] = true
		}
	}
	type byLife struct{ live, killed int }
	workerDone, effectsBy, recordFailedDone := map[string]*byLife{}, map[string]*byLife{}, map[string]int{}
	count := func(m map[string]*byLife, id, proc string) {
		if m[id] == nil {
			m[id] = &byLife{}
		}
		if killed[proc] {
			m[id].killed++
		} else {
			m[id].live++
		}
	}
	recordFailed2xx := 0
	for _, ev := range history {
		if ev.Hop != hopWorker {
			continue
		}
		switch {
		case ev.Op == "listening" && killed[ev.Proc]:
			killedUUID[ev.Processor] = true
		case ev.Op == "inbox" && ev.Outcome == string(outbox.StatusDone):
			count(workerDone, ev.ID, ev.Proc)
		case ev.Op == "effect":
			count(effectsBy, ev.ID, ev.Proc)
		case ev.Op == "record_failed":
			if ev.Outcome == string(outbox.StatusDone) && !killed[ev.Proc] {
				recordFailedDone[ev.ID]++
			}
			if ev.Status/100 == 2 {
				recordFailed2xx++
			}
		}
	}
	type call struct{ proc, op, id string }
	open := map[call]int{}
	var indeterminate []string
	for _, ev := range history {
		if ev.Hop != hopOrchestrator || ev.ID == "" {
			continue
		}
		k := call{ev.Proc, ev.Op, ev.ID}
		switch ev.Phase {
		case "call":
			open[k]++
		case "answer":
			open[k]--
			if ev.Err != "" {
				indeterminate = append(indeterminate, ev.ID)
			} else if ev.Op != "cancel" {
				acked[ev.ID] = true
			}
		}
	}
	for k, n := range open {
		for range n {
			indeterminate = append(indeterminate, k.id)
		}
	}
	rep.Indeterminate = len(indeterminate)
	for _, id := range indeterminate {
		r, ok := f.records[id]
		switch {
		case !ok:
			rep.Resolved["never recorded"]++
		case r.Status == outbox.StatusCreated || r.Status == outbox.StatusAlreadyExisted:
			rep.Resolved["task exists once ("+string(r.Status)+")"]++
		case r.Status == outbox.StatusCancelled:
			rep.Resolved["cancelled"]++
		default:
			rep.Resolved["unresolved ("+string(r.Status)+")"]++
			problem("indeterminate call still unresolved", id)
		}
	}

	succeeded := map[string]int{}          // per Cloud Tasks ID
	queues := map[string]map[string]bool{} // per Cloud Tasks ID: queues of its tasks and deliveries
	inQueue := func(cid, queue string) {
		if queues[cid] == nil {
			queues[cid] = map[string]bool{}
		}
		queues[cid][queue] = true
	}
	for cid, qs := range f.tasks {
		for _, q := range qs {
			inQueue(cid, q)
		}
	}
	emuSucceeded := 0
	for _, d := range f.deliveries {
		cid := d.Task[strings.LastIndexByte(d.Task, '/')+1:]
		inQueue(cid, d.Queue)
		if d.Outcome == emulator.OutcomeSucceeded {
			succeeded[cid]++
		}
		if d.StatusCode/100 == 2 {
			emuSucceeded++
		}
	}
	done := map[string]*byLife{}
	worker2xx, killed2xx := 0, 0
	for _, r := range f.deliveryRows {
		id, _, ok := outbox.SplitDeliveryID(r.ID)
		if !ok {
			problem("deliveries table row without a delivery ID", r.ID)
			continue
		}
		switch r.Status {
		case outbox.StatusDone:
			if done[id] == nil {
				done[id] = &byLife{}
			}
			if killedUUID[r.ProcessorUUID] {
				done[id].killed++
			} else {
				done[id].live++
			}
		case outbox.StatusDuplicate:
			rep.Absorbed++
		}
		if r.Delivery.HTTPStatus/100 == 2 {
			worker2xx++
			if killedUUID[r.ProcessorUUID] {
				killed2xx++
			}
		}
	}

	planned := map[string]bool{}
	for _, it := range plan {
		nid := q.id(it)
		id, cid := nid.String(), nid.CloudTaskID()
		planned[id] = true
		r, recorded := f.records[id]
		effects := f.effects[id]
		if acked[id] {
			rep.Acknowledged++
		}
		// An ID's task lives in the queue of its first record, whichever
		// process's default queue that was: every task and delivery of it
		// is there, and a repeat never makes one in another queue.
		if recorded {
			rep.Queues[path.Base(r.Queue)]++
		}
		switch qs := queues[cid]; {
		case len(qs) > 1:
			problem("tasks of one ID in two queues", id)
		case len(qs) == 1 && recorded && !qs[r.Queue]:
			problem("a task or delivery in a queue its record does not name", id)
		}
		switch {
		case it.wantsEffect():
			switch {
			case effects == 0 && acked[id]:
				rep.Lost++
				problem("lost effect (acknowledged, no effect)", id)
			case effects == 0:
				problem("never acknowledged and no effect", id)
			case effects > 1:
				rep.Duplicate++
				problem("duplicate effect", id)
			}
			if it.Kind == itemRetry && effects > 0 {
				rep.TimersFired++
			}
			if !recorded || (r.Status != outbox.StatusCreated && r.Status != outbox.StatusAlreadyExisted) {
				problem("outbox record not created or already_existed", id)
			}
			if len(f.tasks[cid]) > 0 {
				problem("task still queued after the drain", id)
			}
			if succeeded[cid] == 0 {
				problem("emulator never delivered it with success", id)
			}
			wd, eb, dr := orZero(workerDone[id]), orZero(effectsBy[id]), orZero(done[id])
			if wd.live != eb.live || wd.killed > eb.killed {
				problem("workers' inbox outcomes done differ from their effects", id)
			}
			if dr.live != wd.live-recordFailedDone[id] || dr.killed > wd.killed {
				problem("deliveries table's done rows differ from the workers' outcomes (less records not kept)", id)
			}
		case it.Kind == itemHeld:
			if effects > 0 {
				problem("effect of a held timer", id)
			}
			if !recorded || !r.Status.Terminal() || r.Status == outbox.StatusCancelled {
				problem("held timer not recorded created", id)
			}
			if len(f.tasks[cid]) == 0 {
				problem("held timer's task missing", id)
			} else {
				rep.TimersHeld++
			}
		default: // cancelled
			if effects > 0 {
				problem("effect of a cancelled attempt", id)
			}
			if !recorded || r.Status != outbox.StatusCancelled {
				problem("cancelled attempt's latest record not cancelled", id)
			}
			if len(f.tasks[cid]) > 0 {
				problem("cancelled attempt's task still queued", id)
			}
			if it.Kind == itemCancelTimer && recorded && r.Status == outbox.StatusCancelled {
				rep.TimersCancelled++
			}
		}
	}
	rep.PastDeadline = checkDeadlines(history, f.deliveries, problem)
	for id, n := range f.effects {
		rep.Effects += n
		if !planned[id] {
			problem("effect of an ID no one planned", id)
		}
	}
	// A killed worker may have recorded answers it never sent.
	if want := emuSucceeded + f.extra2xx - f.dropped - recordFailed2xx; worker2xx < want || worker2xx > want+killed2xx {
		problems[fmt.Sprintf("deliveries table has %d 2xx answers (%d by killed workers); the emulator saw %d, its transport kept %d more from it and answered %d itself, and the workers could not record %d", worker2xx, killed2xx, emuSucceeded, f.extra2xx, f.dropped, recordFailed2xx)] = nil
	}
	for _, rule := range slices.Sorted(maps.Keys(problems)) {
		ids := problems[rule]
		if len(ids) == 0 {
			rep.Problems = append(rep.Problems, rule)
			continue
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %d (e.g. %s)", rule, len(ids), ids[0]))
	}
	return rep
}

// What the emulator's delivery log says of an attempt its dispatch
// deadline ended: this in Err (cloudtasks/emulator's TestDispatchDeadline
// holds it to that), and this retry reason on the next attempt, as Cloud
// Tasks sends it.
const (
	emulatorDeadlineErr = "dispatch deadline exceeded"
	retryReasonDeadline = "DEADLINE_EXCEEDED"
)

// checkDeadlines checks that the emulator and its transport agree on the
// attempts whose 2xx the transport withheld until the dispatch deadline:
// each is an attempt the emulator recorded as failed by that deadline, with
// no status, and retried, the next attempt saying why. It returns how many
// attempts the emulator failed by their deadline. Others than the withheld
// ones are no problem: a worker on a starved machine may take that long,
// and the attempt is retried as any failed one.
func checkDeadlines(history []e2eEvent, deliveries []emulator.Delivery, problem func(rule, id string)) (past int) {
	var withheld []attemptRef
	for _, ev := range history {
		if ev.Hop == hopEmulator && ev.Op == "fault" && ev.Detail == faultDeadline {
			withheld = append(withheld, attemptRef{id: ev.ID, retry: ev.Attempt - 1})
		}
	}
	byAttempt := map[attemptRef]emulator.Delivery{}
	for _, d := range deliveries {
		byAttempt[attemptRef{id: d.Header.Get("Idempotency-Key"), retry: int(d.Attempt) - 1}] = d
		if strings.Contains(d.Err, emulatorDeadlineErr) {
			past++
		}
	}
	for _, a := range withheld {
		d, ok := byAttempt[a]
		switch {
		case !ok || !strings.Contains(d.Err, emulatorDeadlineErr) || d.StatusCode != 0 || d.Outcome != emulator.OutcomeRetry:
			problem("a 2xx withheld past the dispatch deadline that the emulator did not record as a deadline failure, retried", a.id)
		case byAttempt[attemptRef{id: a.id, retry: a.retry + 1}].Header.Get("X-CloudTasks-TaskRetryReason") != retryReasonDeadline:
			problem("the attempt after a deadline failure does not give "+retryReasonDeadline+" as its retry reason", a.id)
		}
	}
	return past
}

func orZero[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// line summarises the report for the scenario's result line.
func (r e2eReport) line() string {
	res := make([]string, 0, len(r.Resolved))
	for _, k := range slices.Sorted(maps.Keys(r.Resolved)) {
		res = append(res, fmt.Sprintf("%d %s", r.Resolved[k], k))
	}
	resolved := "none"
	if len(res) > 0 {
		resolved = strings.Join(res, ", ")
	}
	queues := make([]string, 0, len(r.Queues))
	for _, k := range slices.Sorted(maps.Keys(r.Queues)) {
		queues = append(queues, fmt.Sprintf("%d in %s", r.Queues[k], k))
	}
	return fmt.Sprintf("%d logical attempts, %d acknowledged, %d effects, %d lost, %d duplicate effects, %d duplicate deliveries absorbed by the inbox, %d indeterminate calls resolved as: %s; timers %d fired, %d cancelled, %d held; %d attempts failed by the dispatch deadline; records by queue: %s",
		r.Attempts, r.Acknowledged, r.Effects, r.Lost, r.Duplicate, r.Absorbed, r.Indeterminate, resolved, r.TimersFired, r.TimersCancelled, r.TimersHeld, r.PastDeadline, strings.Join(queues, ", "))
}
