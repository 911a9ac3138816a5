package chaos

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	cloudtasks "cloud.google.com/go/cloudtasks/apiv2"
	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
)

// events collects what a transport writes to the history and signals each
// event of one op.
type events struct {
	mu   sync.Mutex
	all  []e2eEvent
	op   string
	seen chan e2eEvent
}

func newEvents(op string) *events { return &events{op: op, seen: make(chan e2eEvent, 16)} }

func (e *events) add(ev e2eEvent) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
	if ev.Op == e.op {
		e.seen <- ev
	}
}

func (e *events) list() []e2eEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]e2eEvent(nil), e.all...)
}

// effectWorker answers every request with code after reading its body,
// and counts the requests whose body arrived whole.
type effectWorker struct {
	code  int
	mu    sync.Mutex
	whole int
	srv   *httptest.Server
}

func newEffectWorker(t *testing.T, code int) *effectWorker {
	w := &effectWorker{code: code}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || int64(len(body)) != r.ContentLength {
			return // a body cut short: no answer that counts
		}
		w.mu.Lock()
		w.whole++
		w.mu.Unlock()
		rw.WriteHeader(w.code)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *effectWorker) received() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.whole
}

func (w *effectWorker) addr() string { return w.srv.Listener.Addr().String() }

// Each planned kind goes to an item of its own that must take effect, the
// deadline to the one an orchestrator reaches first, for every seed.
func TestAssignDeliveryFaults(t *testing.T) {
	t.Parallel()
	q := e2eRequests{run: "r", url: e2eURL, account: e2eAccount, base: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	orders := []uint64{0, 100, 200}
	for seed := uint64(1); seed <= 8; seed++ {
		plan := e2ePlan(seed, DefaultE2EItems)
		got := assignDeliveryFaults(plan, q, seed, orders, deliveryKinds)
		require.Len(t, got, len(deliveryKinds), "seed %d", seed)
		byKind := map[string]e2eItem{}
		for _, it := range plan {
			if kind, ok := got[q.id(it).String()]; ok {
				require.True(t, it.wantsEffect(), "seed %d: %s on a %s item", seed, kind, it.Kind)
				byKind[kind] = it
			}
		}
		require.Len(t, byKind, len(deliveryKinds), "seed %d", seed)
		// The deadline's item is the first that takes effect in one of the
		// first runs' orders.
		first := map[int]bool{}
		for _, o := range orders {
			for _, i := range e2eOrder(seed, o, len(plan)) {
				if plan[i].wantsEffect() {
					first[i] = true
					break
				}
			}
		}
		require.True(t, first[byKind[faultDeadline].K], "seed %d: deadline on item %d, first ones %v", seed, byKind[faultDeadline].K, first)
		require.Equal(t, got, assignDeliveryFaults(plan, q, seed, orders, deliveryKinds))
	}
}

// The leg's plan of delivery faults: each planned kind on its item, by
// internal ID, as the emulator's fault of that kind; the drawn ones at
// their rates; and a plan the emulator accepts.
func TestE2EDeliveryFaultsPlan(t *testing.T) {
	t.Parallel()
	planned := map[string]string{"dispatch:r:k1:1": faultDeadline, "dispatch:r:k2:1": faultDupAfter2xx, "dispatch:r:k3:1": faultLost2xx,
		"dispatch:r:k4:1": faultReset, "dispatch:r:k5:1": faultDelay, "dispatch:r:k6:1": faultDropped}
	plan := e2eDeliveryFaults(9, planned, newDeliveryLedger(planned, func(e2eEvent) {}))
	require.NotNil(t, plan.OnFault)
	plan.OnFault = nil
	require.Equal(t, emulator.DeliveryFaults{
		Seed: 9,
		Rates: map[emulator.DeliveryFault]float64{
			emulator.FaultDeliverTwice: 0.04, emulator.FaultLoseReply: 0.04, emulator.FaultReset: 0.03, emulator.FaultDelay: 0.10,
		},
		Tasks: map[string]emulator.DeliveryFault{
			"dispatch:r:k1:1": emulator.FaultWithhold, "dispatch:r:k2:1": emulator.FaultDeliverTwice, "dispatch:r:k3:1": emulator.FaultLoseReply,
			"dispatch:r:k4:1": emulator.FaultReset, "dispatch:r:k5:1": emulator.FaultDelay, "dispatch:r:k6:1": emulator.FaultDrop,
		},
		Delay: 300 * time.Millisecond,
	}, plan)
	emu, err := emulator.New(emulator.Config{DeliveryFaults: plan, ManualDelivery: true})
	require.NoError(t, err)
	require.NoError(t, emu.Close())
}

// faultLeg is an emulator on a fake clock whose deliveries go, through a
// leg's delivery faults, to the balancer over workers.
type faultLeg struct {
	emu     *emulator.Server
	client  *cloudtasks.Client
	clock   *clockwork.FakeClock
	ledger  *deliveryLedger
	events  *events
	waiting chan emulator.DeliveryFaultEvent
}

const faultQueue = "projects/chaos/locations/local/queues/work"

// newFaultLeg starts a leg with the scenario's plan of delivery faults
// (seed 1) for planned, changed by edit when it is not nil.
func newFaultLeg(t *testing.T, planned map[string]string, edit func(*emulator.DeliveryFaults), workers ...*effectWorker) *faultLeg {
	t.Helper()
	l := &faultLeg{clock: clockwork.NewFakeClockAt(time.Now()), events: newEvents("withhold"), waiting: make(chan emulator.DeliveryFaultEvent, 4)}
	l.ledger = newDeliveryLedger(planned, l.events.add)
	plan := e2eDeliveryFaults(1, planned, l.ledger)
	plan.OnFault = func(ev emulator.DeliveryFaultEvent) {
		l.ledger.add(ev)
		if ev.Waiting {
			l.waiting <- ev
		}
	}
	if edit != nil {
		edit(&plan)
	}
	lb := newBalancer()
	var addrs []string
	for _, w := range workers {
		addrs = append(addrs, w.addr())
	}
	lb.setWorkers(addrs)
	var err error
	l.emu, err = emulator.New(emulator.Config{Clock: l.clock, ManualDelivery: true, DeliveryLogLimit: 10,
		Queues:     []emulator.QueueConfig{{Name: faultQueue, MinBackoff: time.Second, MaxBackoff: time.Second}},
		HTTPClient: &http.Client{Transport: lb}, DeliveryFaults: plan})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.emu.Close()) })
	l.client, err = l.emu.NewClient(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { l.client.Close() })
	return l
}

// create makes the task of internal ID id, due now, with a 15 s dispatch
// deadline as the scenario's tasks have.
func (l *faultLeg) create(t *testing.T, name, id string) {
	t.Helper()
	_, err := l.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: faultQueue, Task: &cloudtaskspb.Task{
		Name:             faultQueue + "/tasks/" + name,
		DispatchDeadline: durationpb.New(15 * time.Second),
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url: e2eURL, Body: []byte(`{"run":"r","k":1}`), Headers: map[string]string{"Idempotency-Key": id}}},
	}})
	require.NoError(t, err)
}

// Each planned fault, through the emulator's delivery faults and the
// balancer, does to one attempt what it says and counts only once it
// happened: against workers that answer 2xx it lands (a doubled delivery
// on the other worker), against ones that answer 503 it waits for the
// item's next attempt.
func TestDeliveryFaultsThroughTheEmulator(t *testing.T) {
	t.Parallel()
	const id = "dispatch:r:k00001:1"
	tests := []struct {
		kind string
		code int
		// status is what the emulator's delivery log records.
		status int
		// received is how many whole requests the workers got.
		received int
		counts   map[string]int
		extra2xx int
		pending  map[string]string
	}{
		{faultDupAfter2xx, 200, 200, 2, map[string]int{faultDupAfter2xx: 1}, 1, map[string]string{}},
		{faultLost2xx, 200, 0, 1, map[string]int{faultLost2xx: 1}, 1, map[string]string{}},
		{faultReset, 200, 0, 0, map[string]int{faultReset: 1}, 0, map[string]string{}},
		{faultDelay, 200, 200, 1, map[string]int{faultDelay: 1}, 0, map[string]string{}},
		{faultDeadline, 200, 0, 1, map[string]int{faultDeadline: 1}, 1, map[string]string{}},
		{faultDropped, 200, 200, 0, map[string]int{faultDropped: 1}, 0, map[string]string{}},
		{faultLost2xx, 503, 503, 1, map[string]int{}, 0, map[string]string{id: faultLost2xx}},
		{faultDupAfter2xx, 503, 503, 1, map[string]int{}, 0, map[string]string{id: faultDupAfter2xx}},
		{faultDeadline, 503, 503, 1, map[string]int{}, 0, map[string]string{id: faultDeadline}},
	}
	for _, tt := range tests {
		t.Run(tt.kind+" "+strconv.Itoa(tt.code), func(t *testing.T) {
			t.Parallel()
			w1, w2 := newEffectWorker(t, tt.code), newEffectWorker(t, tt.code)
			planned := map[string]string{id: tt.kind}
			l := newFaultLeg(t, planned, nil, w1, w2)
			l.create(t, "t1", id)
			ran := make(chan error, 1)
			go func() { _, err := l.emu.RunDue(context.Background()); ran <- err }()
			switch {
			case tt.kind == faultDelay:
				<-l.waiting
				l.clock.Advance(e2eFaultDelay)
			case tt.kind == faultDeadline && tt.code == 200:
				<-l.events.seen
				l.clock.Advance(15 * time.Second)
			}
			require.NoError(t, <-ran)
			ds := l.emu.Deliveries()
			require.Len(t, ds, 1)
			require.Equal(t, tt.status, ds[0].StatusCode)
			require.Equal(t, tt.received, w1.received()+w2.received())
			if tt.kind == faultDupAfter2xx && tt.code == 200 {
				require.Equal(t, []int{1, 1}, []int{w1.received(), w2.received()}, "the second delivery goes to the other worker")
			}
			counts, extra := l.ledger.snapshot()
			require.Equal(t, tt.counts, counts)
			require.Equal(t, tt.extra2xx, extra)
			require.Equal(t, tt.pending, l.ledger.unlanded())
		})
	}
}

// A 2xx withheld past the dispatch deadline, through the emulator on a
// fake clock: the worker answered (its effect committed), the emulator
// records a failed attempt by its deadline and delivers again with retry
// count 1 and the reason, and the checker finds the two agree.
func TestDeliveryFaultsDeadlineThroughTheEmulator(t *testing.T) {
	t.Parallel()
	const id = "dispatch:r:k00001:1"
	w := newEffectWorker(t, 200)
	planned := map[string]string{id: faultDeadline}
	// No drawn faults: the redelivery must meet none.
	l := newFaultLeg(t, planned, func(p *emulator.DeliveryFaults) { p.Rates = nil }, w)
	l.create(t, "slow", id)

	ran := make(chan error, 1)
	go func() {
		_, err := l.emu.RunDue(context.Background())
		ran <- err
	}()
	<-l.events.seen // the worker answered; the emulator's faults hold its 2xx
	l.clock.Advance(15 * time.Second)
	require.NoError(t, <-ran)
	l.clock.Advance(time.Second) // the queue's backoff
	n, err := l.emu.RunDue(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)

	ds := l.emu.Deliveries()
	require.Len(t, ds, 2)
	require.Equal(t, []int32{1, 2}, []int32{ds[0].Attempt, ds[1].Attempt})
	require.Equal(t, "dispatch deadline exceeded of 15s", ds[0].Err)
	require.Equal(t, []int{0, 200}, []int{ds[0].StatusCode, ds[1].StatusCode})
	require.Equal(t, []string{emulator.OutcomeRetry, emulator.OutcomeSucceeded}, []string{ds[0].Outcome, ds[1].Outcome})
	require.Equal(t, "1", ds[1].Header.Get("X-CloudTasks-TaskRetryCount"))
	require.Equal(t, 2, w.received())
	counts, extra := l.ledger.snapshot()
	require.Equal(t, map[string]int{faultDeadline: 1}, counts)
	require.Equal(t, 1, extra)

	var problems []string
	require.Equal(t, 1, checkDeadlines(l.events.list(), ds, func(rule, id string) { problems = append(problems, rule+": "+id) }))
	require.Empty(t, problems)
	// The same history against a log that says the attempt succeeded.
	ds[0].Err, ds[0].Outcome, ds[0].StatusCode = "", emulator.OutcomeSucceeded, 200
	require.Zero(t, checkDeadlines(l.events.list(), ds, func(rule, id string) { problems = append(problems, rule+": "+id) }))
	require.Equal(t, []string{"a 2xx withheld past the dispatch deadline that the emulator did not record as a deadline failure, retried: " + id}, problems)
}
