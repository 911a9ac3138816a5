package chaos

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// The delivery faults the e2e scenario's emulator suffers, through its
// Config.DeliveryFaults. The fault of an attempt is keyed to the attempt,
// not to the order attempts arrive in (see emulator.DeliveryFaults).
const (
	faultDupAfter2xx = "delivered twice after a 2xx"
	faultLost2xx     = "2xx lost"
	faultDelay       = "delayed (reordered)"
	faultReset       = "connection reset mid-request"
	// faultDeadline is a worker's 2xx withheld until the emulator's
	// dispatch deadline (15 s) ends the attempt: the effect committed, the
	// emulator counts a failed attempt and delivers again.
	faultDeadline = "2xx withheld past the dispatch deadline"
	// faultDropped is a planted fault: the attempt is answered 200 without
	// reaching a worker. Only a mutation test plans it.
	faultDropped = "answered 200 without delivery (planted)"
)

// deliveryKinds are the delivery faults every leg plans, each given to an
// item of its own so that it lands whatever the timing. Only
// faultDeadline is never drawn: each one holds an attempt for 15 s.
var deliveryKinds = []string{faultDeadline, faultDupAfter2xx, faultLost2xx, faultReset, faultDelay}

// attemptRef names one delivery attempt: the task's internal ID and its
// retry count (X-CloudTasks-TaskRetryCount).
type attemptRef struct {
	id    string
	retry int
}

// e2eFaultDelay bounds a drawn delay and is the length of a planned one.
const e2eFaultDelay = 300 * time.Millisecond

// deliveryFaultOf is the emulator's delivery fault of each kind the
// scenario plans or draws.
var deliveryFaultOf = map[string]emulator.DeliveryFault{
	faultDupAfter2xx: emulator.FaultDeliverTwice,
	faultLost2xx:     emulator.FaultLoseReply,
	faultDelay:       emulator.FaultDelay,
	faultReset:       emulator.FaultReset,
	faultDeadline:    emulator.FaultWithhold,
	faultDropped:     emulator.FaultDrop,
}

// kindOf is the scenario's name of an emulator's delivery fault.
func kindOf(f emulator.DeliveryFault) string {
	for kind, df := range deliveryFaultOf {
		if df == f {
			return kind
		}
	}
	return string(f)
}

// e2eDeliveryFaults is the emulator's plan of delivery faults for a leg:
// the planned ones on their items (by internal ID, the tasks'
// Idempotency-Key), and, drawn from seed, 4% of attempts delivered twice,
// 4% with their 2xx lost, 3% reset and 10% delayed up to e2eFaultDelay.
// The deadline is never drawn: each one holds an attempt for 15 s. The
// ledger hears every fault.
func e2eDeliveryFaults(seed uint64, planned map[string]string, ledger *deliveryLedger) emulator.DeliveryFaults {
	tasks := make(map[string]emulator.DeliveryFault, len(planned))
	for id, kind := range planned {
		tasks[id] = deliveryFaultOf[kind]
	}
	return emulator.DeliveryFaults{
		Seed: seed,
		Rates: map[emulator.DeliveryFault]float64{
			emulator.FaultDeliverTwice: 0.04, emulator.FaultLoseReply: 0.04, emulator.FaultReset: 0.03, emulator.FaultDelay: 0.10,
		},
		Tasks:   tasks,
		Delay:   e2eFaultDelay,
		OnFault: ledger.add,
	}
}

// assignDeliveryFaults gives each kind to an item of its own, among those
// that must take effect (so they are surely delivered): the items the
// orchestrators reach first in their first runs, whose orders are given,
// so the deadline's 15 s run beside the rest of the leg. It returns the
// kind by internal ID.
func assignDeliveryFaults(plan []e2eItem, q e2eRequests, seed uint64, orders []uint64, kinds []string) map[string]string {
	first := make([]int, len(plan)) // the earliest place of each item in any order
	for i := range first {
		first[i] = len(plan)
	}
	for _, o := range orders {
		for place, i := range e2eOrder(seed, o, len(plan)) {
			first[i] = min(first[i], place)
		}
	}
	var candidates []e2eItem
	for _, it := range plan {
		if it.wantsEffect() {
			candidates = append(candidates, it)
		}
	}
	slices.SortStableFunc(candidates, func(a, b e2eItem) int { return cmp.Compare(first[a.K], first[b.K]) })
	out := make(map[string]string, len(kinds))
	for i, kind := range kinds {
		if i < len(candidates) {
			out[q.id(candidates[i]).String()] = kind
		}
	}
	return out
}

// deliveryLedger keeps what the emulator's delivery faults did in a leg:
// it writes each to the history, and counts those that happened, the 2xx
// answers the emulator never saw, and the planned faults still to come.
type deliveryLedger struct {
	emit func(e2eEvent)

	mu sync.Mutex
	// planned holds the planned fault of each item (by internal ID) that
	// has not happened yet: the emulator keeps it on the item until then.
	planned map[string]string
	counts  map[string]int
	// extra2xx counts 2xx answers the emulator never saw: the first
	// delivery of a doubled attempt, the lost ones and the withheld ones.
	extra2xx int
}

func newDeliveryLedger(planned map[string]string, emit func(e2eEvent)) *deliveryLedger {
	p := make(map[string]string, len(planned))
	for id, kind := range planned {
		p[id] = kind
	}
	return &deliveryLedger{emit: emit, planned: p, counts: map[string]int{}}
}

// add takes one report of the emulator's DeliveryFaults.OnFault.
func (l *deliveryLedger) add(ev emulator.DeliveryFaultEvent) {
	kind := kindOf(ev.Fault)
	if ev.Waiting {
		if ev.Fault == emulator.FaultWithhold {
			// The 2xx is kept from the emulator however the attempt ends.
			l.mu.Lock()
			l.extra2xx++
			l.mu.Unlock()
			l.emit(e2eEvent{Hop: hopEmulator, Op: "withhold", ID: ev.Key, Attempt: int(ev.Attempt), Status: ev.Status})
		}
		return
	}
	l.mu.Lock()
	l.counts[kind]++
	switch ev.Fault {
	case emulator.FaultLoseReply:
		l.extra2xx++
	case emulator.FaultDeliverTwice:
		if ev.Repeat/100 == 2 {
			l.extra2xx++
		}
	}
	if l.planned[ev.Key] == kind {
		delete(l.planned, ev.Key)
	}
	l.mu.Unlock()
	l.emit(e2eEvent{Hop: hopEmulator, Op: "fault", ID: ev.Key, Attempt: int(ev.Attempt), Status: ev.Status, Detail: kind})
}

// snapshot returns the faults that happened and the 2xx answers the
// emulator did not see.
func (l *deliveryLedger) snapshot() (map[string]int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.counts))
	for k, v := range l.counts {
		out[k] = v
	}
	return out, l.extra2xx
}

// unlanded returns the planned faults that have not happened, by internal
// ID.
func (l *deliveryLedger) unlanded() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]string, len(l.planned))
	for k, v := range l.planned {
		out[k] = v
	}
	return out
}

// balancer is the emulator's HTTP transport in the e2e scenario, under its
// delivery faults: it sends each attempt to the next live worker in turn,
// and the second delivery of an attempt (emulator.FaultDeliverTwice) to
// another worker than the first, so that an inbox shared by processes
// absorbs it. Which worker gets an attempt depends on timing; what happens
// to the attempt does not.
type balancer struct {
	base http.RoundTripper

	mu      sync.Mutex
	workers []string // live workers' host:port
	next    int
	// first remembers the worker of each attempt sent once.
	first map[attemptRef]string
}

func newBalancer() *balancer {
	return &balancer{base: &http.Transport{MaxIdleConnsPerHost: 16}, first: map[attemptRef]string{}}
}

// setWorkers replaces the list of live workers.
func (b *balancer) setWorkers(addrs []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.workers = append([]string(nil), addrs...)
}

// pick returns the worker for an arrival of attempt a, "" when none is up.
func (b *balancer) pick(a attemptRef) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.workers) == 0 {
		return ""
	}
	if prev, ok := b.first[a]; ok {
		delete(b.first, a)
		for _, w := range b.workers {
			if w != prev {
				return w
			}
		}
		return prev
	}
	b.next++
	w := b.workers[b.next%len(b.workers)]
	b.first[a] = w
	return w
}

// RoundTrip sends one delivery to a live worker.
func (b *balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	a := attemptRef{id: req.Header.Get("Idempotency-Key")}
	var err error
	if a.retry, err = strconv.Atoi(req.Header.Get("X-CloudTasks-TaskRetryCount")); err != nil {
		return nil, fmt.Errorf("X-CloudTasks-TaskRetryCount %q is not a number", req.Header.Get("X-CloudTasks-TaskRetryCount"))
	}
	addr := b.pick(a)
	if addr == "" {
		return nil, errors.New("no worker is up")
	}
	out := req.Clone(req.Context())
	out.URL.Host, out.Host = addr, ""
	return b.base.RoundTrip(out)
}
