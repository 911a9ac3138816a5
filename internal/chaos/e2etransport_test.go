package chaos

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

func deliveryRequest(t *testing.T, ctx context.Context, id string, retry int) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e2eURL, bytes.NewReader([]byte(`{"run":"r","k":1}`)))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", id)
	req.Header.Set("X-CloudTasks-TaskRetryCount", strconv.Itoa(retry))
	return req
}

// The fault of an attempt depends on the seed, the ID, the retry count and
// how often the attempt arrived, never on the order attempts arrive in; a
// planned fault meets every attempt of its item until it lands.
func TestDeliveryFaultsKeyedToTheAttempt(t *testing.T) {
	t.Parallel()
	var attempts []attemptRef
	for k := range 500 {
		for retry := range 4 {
			attempts = append(attempts, attemptRef{id: "dispatch:r:k" + strconv.Itoa(k) + ":1", retry: retry})
		}
	}
	planned := map[string]string{"dispatch:r:k7:1": faultDeadline}
	decideAll := func(order []attemptRef) map[attemptRef]string {
		f := newDeliveryFaults(42, planned, clockwork.NewFakeClockAt(time.Now()), func(e2eEvent) {})
		out := map[attemptRef]string{}
		for _, a := range order {
			fault, delay := f.decide(a)
			out[a] = fault + " " + delay.String()
		}
		return out
	}
	inOrder := decideAll(attempts)
	shuffled := append([]attemptRef(nil), attempts...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	require.Equal(t, inOrder, decideAll(shuffled))

	kinds := map[string]int{}
	for a, fault := range inOrder {
		if a.id == "dispatch:r:k7:1" {
			require.Equal(t, faultDeadline+" 100ms", fault, a)
			continue
		}
		kinds[fault[:strings.LastIndexByte(fault, ' ')]]++
	}
	// About 4%, 4%, 3% and 10% of the 1,996 drawn.
	require.Equal(t, map[string]int{"": 1580, faultDupAfter2xx: 75, faultLost2xx: 95, faultReset: 49, faultDelay: 197}, kinds)

	// A second arrival of the same attempt is drawn again.
	f := newDeliveryFaults(42, nil, clockwork.NewFakeClockAt(time.Now()), func(e2eEvent) {})
	a := attemptRef{id: "dispatch:r:k3:1"}
	first, _ := f.decide(a)
	second, _ := f.decide(a)
	want1, _ := drawFault(42, a, 1)
	want2, _ := drawFault(42, a, 2)
	require.Equal(t, []string{want1, want2}, []string{first, second})
}

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

// Each planned fault does to one attempt what it says, and counts only
// once it happened: against a worker that answers 2xx it lands, against
// one that answers 503 it waits for the item's next attempt.
func TestDeliveryFaultsRoundTrip(t *testing.T) {
	t.Parallel()
	const id = "dispatch:r:k00001:1"
	tests := []struct {
		kind     string
		code     int
		wantErr  string
		wantCode int
		// received is how many whole requests the workers got.
		received int
		counts   map[string]int
		extra2xx int
		pending  map[string]string
	}{
		{faultDupAfter2xx, 200, "", 200, 2, map[string]int{faultDupAfter2xx: 1}, 1, map[string]string{}},
		{faultLost2xx, 200, "injected: the worker's 2xx was lost", 0, 1, map[string]int{faultLost2xx: 1}, 1, map[string]string{}},
		{faultReset, 200, "injected: connection reset mid-request", 0, 0, map[string]int{faultReset: 1}, 0, map[string]string{}},
		{faultDelay, 200, "", 200, 1, map[string]int{faultDelay: 1}, 0, map[string]string{}},
		{faultDeadline, 200, "withheld until the attempt ended: clockwork.FakeClock: context deadline exceeded", 0, 1, map[string]int{faultDeadline: 1}, 1, map[string]string{}},
		{faultDropped, 200, "", 200, 0, map[string]int{faultDropped: 1}, 0, map[string]string{}},
		{faultLost2xx, 503, "", 503, 1, map[string]int{}, 0, map[string]string{id: faultLost2xx}},
		{faultDupAfter2xx, 503, "", 503, 1, map[string]int{}, 0, map[string]string{id: faultDupAfter2xx}},
		{faultDeadline, 503, "", 503, 1, map[string]int{}, 0, map[string]string{id: faultDeadline}},
	}
	for _, tt := range tests {
		t.Run(tt.kind+" "+strconv.Itoa(tt.code), func(t *testing.T) {
			t.Parallel()
			w1, w2 := newEffectWorker(t, tt.code), newEffectWorker(t, tt.code)
			clock := clockwork.NewFakeClockAt(time.Now())
			ev := newEvents("withhold")
			f := newDeliveryFaults(1, map[string]string{id: tt.kind}, clock, ev.add)
			f.setWorkers([]string{w1.addr(), w2.addr()})
			ctx, cancel := clockwork.WithTimeout(context.Background(), clock, 15*time.Second)
			defer cancel()
			type result struct {
				resp *http.Response
				err  error
			}
			done := make(chan result, 1)
			go func() {
				resp, err := f.RoundTrip(deliveryRequest(t, ctx, id, 0))
				done <- result{resp, err}
			}()
			switch {
			case tt.kind == faultDelay:
				require.NoError(t, clock.BlockUntilContext(ctx, 2)) // the deadline and the delay
				clock.Advance(plannedDelay)
			case tt.kind == faultDeadline && tt.code == 200:
				<-ev.seen
				clock.Advance(15 * time.Second)
			}
			res := <-done
			if tt.wantErr != "" {
				require.ErrorContains(t, res.err, tt.wantErr)
			} else {
				require.NoError(t, res.err)
				require.Equal(t, tt.wantCode, res.resp.StatusCode)
				res.resp.Body.Close()
			}
			require.Equal(t, tt.received, w1.received()+w2.received())
			counts, extra := f.snapshot()
			require.Equal(t, tt.counts, counts)
			require.Equal(t, tt.extra2xx, extra)
			require.Equal(t, tt.pending, f.unlanded())
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
	// A seed whose draw leaves the redelivery alone.
	seed := uint64(1)
	for ; ; seed++ {
		if fault, _ := drawFault(seed, attemptRef{id: id, retry: 1}, 1); fault == "" {
			break
		}
	}
	w := newEffectWorker(t, 200)
	clock := clockwork.NewFakeClockAt(time.Now())
	ev := newEvents("withhold")
	tr := newDeliveryFaults(seed, map[string]string{id: faultDeadline}, clock, ev.add)
	tr.setWorkers([]string{w.addr()})
	queue := "projects/chaos/locations/local/queues/work"
	emu, err := emulator.New(emulator.Config{Clock: clock, ManualDelivery: true, DeliveryLogLimit: 10,
		Queues:     []emulator.QueueConfig{{Name: queue, MinBackoff: time.Second, MaxBackoff: time.Second}},
		HTTPClient: &http.Client{Transport: tr}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, emu.Close()) })
	client, err := emu.NewClient(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	_, err = client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: &cloudtaskspb.Task{
		Name:             queue + "/tasks/slow",
		DispatchDeadline: durationpb.New(15 * time.Second),
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url: e2eURL, Body: []byte(`{"k":1}`), Headers: map[string]string{"Idempotency-Key": id}}},
	}})
	require.NoError(t, err)

	ran := make(chan error, 1)
	go func() {
		_, err := emu.RunDue(context.Background())
		ran <- err
	}()
	<-ev.seen // the worker answered; the transport holds its 2xx
	clock.Advance(15 * time.Second)
	require.NoError(t, <-ran)
	clock.Advance(time.Second) // the queue's backoff
	n, err := emu.RunDue(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)

	ds := emu.Deliveries()
	require.Len(t, ds, 2)
	require.Equal(t, []int32{1, 2}, []int32{ds[0].Attempt, ds[1].Attempt})
	require.Equal(t, "dispatch deadline exceeded of 15s", ds[0].Err)
	require.Equal(t, []int{0, 200}, []int{ds[0].StatusCode, ds[1].StatusCode})
	require.Equal(t, []string{emulator.OutcomeRetry, emulator.OutcomeSucceeded}, []string{ds[0].Outcome, ds[1].Outcome})
	require.Equal(t, "1", ds[1].Header.Get("X-CloudTasks-TaskRetryCount"))
	require.Equal(t, 2, w.received())
	counts, extra := tr.snapshot()
	require.Equal(t, map[string]int{faultDeadline: 1}, counts)
	require.Equal(t, 1, extra)

	var problems []string
	require.Equal(t, 1, checkDeadlines(ev.list(), ds, func(rule, id string) { problems = append(problems, rule+": "+id) }))
	require.Empty(t, problems)
	// The same history against a log that says the attempt succeeded.
	ds[0].Err, ds[0].Outcome, ds[0].StatusCode = "", emulator.OutcomeSucceeded, 200
	require.Zero(t, checkDeadlines(ev.list(), ds, func(rule, id string) { problems = append(problems, rule+": "+id) }))
	require.Equal(t, []string{"a 2xx withheld past the dispatch deadline that the emulator did not record as a deadline failure, retried: " + id}, problems)
}
