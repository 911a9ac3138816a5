package emulator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	ctworker "github.com/ctdispatch/ctdispatch/cloudtasks/worker"
	"github.com/ctdispatch/ctdispatch/naming"
)

// Time budget: about 1 s (loopback HTTP, a fake clock, no sleeps).

// faultWorker is a real worker (package worker, in-memory inbox) on
// loopback, behind a handler that reads each body first and counts the
// requests that arrived whole, and the handler's calls by internal ID.
type faultWorker struct {
	url string
	// failFirst makes the handler's first call fail (500 retry).
	failFirst bool

	mu      sync.Mutex
	whole   int
	handled map[string]int
}

func newFaultWorker(t *testing.T, failFirst bool) *faultWorker {
	t.Helper()
	fw := &faultWorker{failFirst: failFirst, handled: map[string]int{}}
	w, err := ctworker.New(context.Background(), &ctworker.Config{InsecureSkipVerify: true, Inbox: ctworker.NewMemoryInbox()},
		func(_ context.Context, d *ctworker.Delivery) error {
			fw.mu.Lock()
			defer fw.mu.Unlock()
			fw.handled[d.ID.String()]++
			if fw.failFirst && fw.handled[d.ID.String()] == 1 {
				return errors.New("not yet")
			}
			return nil
		})
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return // cut short: the connection is gone, nobody reads an answer
		}
		fw.mu.Lock()
		fw.whole++
		fw.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		w.ServeHTTP(rw, r)
	}))
	t.Cleanup(srv.Close)
	fw.url = srv.URL + "/work"
	return fw
}

func (fw *faultWorker) counts() (whole int, handled map[string]int) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	out := make(map[string]int, len(fw.handled))
	for k, v := range fw.handled {
		out[k] = v
	}
	return fw.whole, out
}

// faultEvents collects what DeliveryFaults.OnFault reports.
type faultEvents struct {
	mu  sync.Mutex
	all []emulator.DeliveryFaultEvent
	// waiting signals each report with Waiting set.
	waiting chan emulator.DeliveryFaultEvent
}

func newFaultEvents() *faultEvents {
	return &faultEvents{waiting: make(chan emulator.DeliveryFaultEvent, 16)}
}

func (e *faultEvents) add(ev emulator.DeliveryFaultEvent) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
	if ev.Waiting {
		e.waiting <- ev
	}
}

func (e *faultEvents) list() []emulator.DeliveryFaultEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]emulator.DeliveryFaultEvent(nil), e.all...)
}

// dispatchTask creates the task ctdispatch would create for id, with its
// Idempotency-Key, and a dispatch deadline when deadline is set.
func dispatchTask(t *testing.T, b *testBundle, id naming.ID, url string, deadline time.Duration) string {
	t.Helper()
	task := &cloudtaskspb.Task{
		Name: queue + "/tasks/" + id.CloudTaskID(),
		MessageType: &cloudtaskspb.Task_HttpRequest{HttpRequest: &cloudtaskspb.HttpRequest{
			Url: url, Body: []byte(`{"n":1}`),
			Headers: map[string]string{ctworker.HeaderIdempotencyKey: id.String()},
		}},
	}
	if deadline > 0 {
		task.DispatchDeadline = durationpb.New(deadline)
	}
	_, err := b.client.CreateTask(context.Background(), &cloudtaskspb.CreateTaskRequest{Parent: queue, Task: task})
	require.NoError(t, err)
	return task.Name
}

// attempt is what the emulator recorded of one attempt, in short.
type attempt struct {
	status  int
	body    string
	err     string
	outcome string
	fault   emulator.DeliveryFault
	// took is the attempt's time on the emulator's clock.
	took time.Duration
	// reason is the attempt's X-CloudTasks-TaskRetryReason.
	reason string
}

func attemptsOf(ds []emulator.Delivery) []attempt {
	out := make([]attempt, len(ds))
	for i, d := range ds {
		out[i] = attempt{d.StatusCode, string(d.ResponseBody), d.Err, d.Outcome, d.Fault,
			d.ResponseTime.Sub(d.DispatchTime), d.Header.Get("X-CloudTasks-TaskRetryReason")}
	}
	return out
}

// Each delivery fault, planted on one task through the emulator's public
// Config and named as a test would name it (its Idempotency-Key, its ID or
// its full name), does to the attempt what it says, as the emulator's
// delivery log and a real worker on loopback both see it; the fault waits
// for a 2xx when it needs one, happens once, and the worker's inbox makes
// the work happen once whatever it did. Waits are on the emulator's fake
// clock, moved when the fault reports that it waits.
func TestDeliveryFaultsPerTask(t *testing.T) {
	t.Parallel()
	const second = time.Second
	lost := "delivery fault: the worker's 200 was lost"
	tests := []struct {
		name      string
		fault     emulator.DeliveryFault
		by        string // "key", "id" or "name"
		deadline  time.Duration
		failFirst bool
		// advance moves the clock when the fault reports that it waits.
		advance time.Duration
		want    []attempt
		whole   int
		handled int
		events  []emulator.DeliveryFaultEvent // Task, Key and Attempt filled in below
	}{
		{"a lost reply is delivered again", emulator.FaultLoseReply, "key", 0, false, 0,
			[]attempt{{0, "", lost, emulator.OutcomeRetry, emulator.FaultLoseReply, 0, ""}, {200, "duplicate\n", "", emulator.OutcomeSucceeded, "", 0, "NO_RESPONSE"}},
			2, 1, []emulator.DeliveryFaultEvent{{Fault: emulator.FaultLoseReply, Attempt: 1, Status: 200}}},
		{"a lost reply waits for a 2xx", emulator.FaultLoseReply, "id", 0, true, 0,
			[]attempt{{500, "retry\n", "", emulator.OutcomeRetry, "", 0, ""}, {0, "", lost, emulator.OutcomeRetry, emulator.FaultLoseReply, 0, "HTTP_STATUS_500"},
				{200, "duplicate\n", "", emulator.OutcomeSucceeded, "", 0, "NO_RESPONSE"}},
			3, 2, []emulator.DeliveryFaultEvent{{Fault: emulator.FaultLoseReply, Attempt: 2, Status: 200}}},
		{"delivered twice after a 2xx", emulator.FaultDeliverTwice, "id", 0, false, 0,
			[]attempt{{200, "duplicate\n", "", emulator.OutcomeSucceeded, emulator.FaultDeliverTwice, 0, ""}},
			2, 1, []emulator.DeliveryFaultEvent{{Fault: emulator.FaultDeliverTwice, Attempt: 1, Status: 200, Repeat: 200}}},
		{"a reset connection", emulator.FaultReset, "name", 0, false, 0,
			[]attempt{{0, "", "delivery fault: the connection was reset halfway through the request's body", emulator.OutcomeRetry, emulator.FaultReset, 0, ""}, {200, "done\n", "", emulator.OutcomeSucceeded, "", 0, "NO_RESPONSE"}},
			1, 1, []emulator.DeliveryFaultEvent{{Fault: emulator.FaultReset, Attempt: 1}}},
		{"a delay on the emulator's clock", emulator.FaultDelay, "key", 0, false, 3 * second,
			[]attempt{{200, "done\n", "", emulator.OutcomeSucceeded, emulator.FaultDelay, 3 * second, ""}},
			1, 1, []emulator.DeliveryFaultEvent{{Fault: emulator.FaultDelay, Attempt: 1, Waiting: true}, {Fault: emulator.FaultDelay, Attempt: 1}}},
		{"a 2xx withheld past the task's 15 s dispatch deadline", emulator.FaultWithhold, "id", 15 * second, false, 15 * second,
			[]attempt{{0, "", "dispatch deadline exceeded of 15s", emulator.OutcomeRetry, emulator.FaultWithhold, 15 * second, ""},
				{200, "duplicate\n", "", emulator.OutcomeSucceeded, "", 0, "DEADLINE_EXCEEDED"}},
			2, 1, []emulator.DeliveryFaultEvent{{Fault: emulator.FaultWithhold, Attempt: 1, Status: 200, Waiting: true}, {Fault: emulator.FaultWithhold, Attempt: 1, Status: 200}}},
		{"a 2xx withheld past the default 10 min dispatch deadline", emulator.FaultWithhold, "name", 0, false, 10 * time.Minute,
			[]attempt{{0, "", "dispatch deadline exceeded of 10m0s", emulator.OutcomeRetry, emulator.FaultWithhold, 10 * time.Minute, ""},
				{200, "duplicate\n", "", emulator.OutcomeSucceeded, "", 0, "DEADLINE_EXCEEDED"}},
			2, 1, []emulator.DeliveryFaultEvent{{Fault: emulator.FaultWithhold, Attempt: 1, Status: 200, Waiting: true}, {Fault: emulator.FaultWithhold, Attempt: 1, Status: 200}}},
		{"answered without delivery", emulator.FaultDrop, "key", 0, false, 0,
			[]attempt{{200, "", "", emulator.OutcomeSucceeded, emulator.FaultDrop, 0, ""}},
			0, 0, []emulator.DeliveryFaultEvent{{Fault: emulator.FaultDrop, Attempt: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fw := newFaultWorker(t, tt.failFirst)
			ev := newFaultEvents()
			id, err := naming.NewDispatch("run1", "extract", naming.Attempt(1))
			require.NoError(t, err)
			name := queue + "/tasks/" + id.CloudTaskID()
			plant := map[string]string{"key": id.String(), "id": id.CloudTaskID(), "name": name}[tt.by]
			b := setup(t, func(c *emulator.Config) {
				c.Queues[0].MinBackoff, c.Queues[0].MaxBackoff = time.Second, time.Second
				c.DeliveryFaults = emulator.DeliveryFaults{Tasks: map[string]emulator.DeliveryFault{plant: tt.fault}, Delay: 3 * time.Second, OnFault: ev.add}
			})
			dispatchTask(t, b, id, fw.url, tt.deadline)
			for b.srv.TaskCount() > 0 {
				ran := make(chan error, 1)
				go func() { _, err := b.srv.RunDue(context.Background()); ran <- err }()
				if tt.advance > 0 && len(b.srv.Deliveries()) == 0 {
					<-ev.waiting
					b.clock.Advance(tt.advance)
				}
				require.NoError(t, <-ran)
				require.Less(t, len(b.srv.Deliveries()), 5, "the task keeps failing")
				b.clock.Advance(time.Second) // the queue's backoff
			}
			require.Equal(t, tt.want, attemptsOf(b.srv.Deliveries()))
			whole, handled := fw.counts()
			require.Equal(t, tt.whole, whole, "requests that reached the worker whole")
			require.Equal(t, tt.handled, handled[id.String()], "handler calls")
			for i := range tt.events {
				tt.events[i].Task, tt.events[i].Key = name, id.String()
			}
			require.Equal(t, tt.events, ev.list())
		})
	}
}

// Faults drawn at rates are keyed to the attempt: two emulators with the
// same seed give every attempt of every task the same fault, whatever order
// the tasks were created in and the attempts ran in, and the worker's inbox
// runs each task's work once through all of them.
func TestDeliveryFaultsAtRatesAreKeyedToTheAttempt(t *testing.T) {
	t.Parallel()
	const tasks = 60
	rates := emulator.DeliveryFaults{Seed: 7, Rates: map[emulator.DeliveryFault]float64{
		emulator.FaultDeliverTwice: 0.1, emulator.FaultLoseReply: 0.1, emulator.FaultReset: 0.1,
	}}
	run := func(reverse bool) (map[string]emulator.DeliveryFault, map[emulator.DeliveryFault]int) {
		fw := newFaultWorker(t, false)
		b := setup(t, func(c *emulator.Config) {
			c.Queues[0].MinBackoff, c.Queues[0].MaxBackoff = time.Second, time.Second
			c.Queues[0].MaxAttempts = -1
			c.DeliveryFaults = rates
		})
		for i := range tasks {
			k := i
			if reverse {
				k = tasks - 1 - i
			}
			id, err := naming.NewDispatch("run1", fmt.Sprint("t", k), naming.Attempt(1))
			require.NoError(t, err)
			dispatchTask(t, b, id, fw.url, 0)
		}
		for round := 0; b.srv.TaskCount() > 0; round++ {
			require.Less(t, round, 20, "tasks still queued")
			runDue(t, b)
			b.clock.Advance(time.Second)
		}
		byAttempt := map[string]emulator.DeliveryFault{}
		counts := map[emulator.DeliveryFault]int{}
		for _, d := range b.srv.Deliveries() {
			byAttempt[fmt.Sprintf("%s#%d", d.Task, d.Attempt)] = d.Fault
			counts[d.Fault]++
		}
		_, handled := fw.counts()
		require.Len(t, handled, tasks)
		for id, n := range handled {
			require.Equal(t, 1, n, id)
		}
		return byAttempt, counts
	}
	first, counts := run(false)
	second, _ := run(true)
	require.Equal(t, first, second)
	require.Equal(t, map[emulator.DeliveryFault]int{"": 54, emulator.FaultDeliverTwice: 6, emulator.FaultLoseReply: 5, emulator.FaultReset: 6}, counts)
}

// A plan that names what does not exist, or rates that cannot be, is
// refused by New and SetDeliveryFaults, naming the field.
func TestDeliveryFaultsRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		faults emulator.DeliveryFaults
		want   string
	}{
		{"unknown kind in Rates", emulator.DeliveryFaults{Rates: map[emulator.DeliveryFault]float64{"lose": 0.1}},
			`emulator: Config.DeliveryFaults.Rates[lose] "lose" is not a delivery fault; allowed: deliver_twice, lose_reply, reset, delay, withhold, drop`},
		{"rate above 1", emulator.DeliveryFaults{Rates: map[emulator.DeliveryFault]float64{emulator.FaultReset: 1.5}},
			`emulator: Config.DeliveryFaults.Rates[reset] "1.5" must be between 0 and 1`},
		{"negative rate", emulator.DeliveryFaults{Rates: map[emulator.DeliveryFault]float64{emulator.FaultReset: -0.1}},
			`emulator: Config.DeliveryFaults.Rates[reset] "-0.1" must be between 0 and 1`},
		{"rates above 1 in all", emulator.DeliveryFaults{Rates: map[emulator.DeliveryFault]float64{emulator.FaultReset: 0.6, emulator.FaultDrop: 0.5}},
			`emulator: Config.DeliveryFaults.Rates "1.1" add up to more than 1; an attempt meets one fault at most`},
		{"unknown kind in Tasks", emulator.DeliveryFaults{Tasks: map[string]emulator.DeliveryFault{"d_abc": "twice"}},
			`emulator: Config.DeliveryFaults.Tasks[d_abc] "twice" is not a delivery fault; allowed: deliver_twice, lose_reply, reset, delay, withhold, drop`},
		{"a task without a name", emulator.DeliveryFaults{Tasks: map[string]emulator.DeliveryFault{"": emulator.FaultDrop}},
			`emulator: Config.DeliveryFaults.Tasks[""] "drop" names no task; give a task ID, a full task name or an Idempotency-Key`},
		{"negative delay", emulator.DeliveryFaults{Delay: -time.Second},
			`emulator: Config.DeliveryFaults.Delay "-1s" must not be negative`},
	}
	srv, err := emulator.New(emulator.Config{ManualDelivery: true})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	for _, tt := range tests {
		_, err := emulator.New(emulator.Config{DeliveryFaults: tt.faults, ManualDelivery: true})
		require.EqualError(t, err, tt.want, tt.name)
		require.ErrorIs(t, err, emulator.ErrInvalidConfig, tt.name)
		require.EqualError(t, srv.SetDeliveryFaults(tt.faults), tt.want, tt.name)
	}
	_, err = emulator.ParseDeliveryFault("twice")
	require.EqualError(t, err, `"twice" is not a delivery fault; allowed: deliver_twice, lose_reply, reset, delay, withhold, drop`)
	for _, k := range emulator.DeliveryFaultKinds() {
		got, err := emulator.ParseDeliveryFault(string(k))
		require.NoError(t, err)
		require.Equal(t, k, got)
	}
}

// SetDeliveryFaults plants a fault on a running emulator, and a fault that
// happened leaves the plan: the task's next attempt is delivered as usual.
func TestSetDeliveryFaults(t *testing.T) {
	t.Parallel()
	fw := newFaultWorker(t, false)
	b := setup(t, func(c *emulator.Config) { c.Queues[0].MinBackoff, c.Queues[0].MaxBackoff = time.Second, time.Second })
	id, err := naming.NewDispatch("run1", "later", naming.Attempt(1))
	require.NoError(t, err)
	require.NoError(t, b.srv.SetDeliveryFaults(emulator.DeliveryFaults{Tasks: map[string]emulator.DeliveryFault{id.String(): emulator.FaultLoseReply}}))
	dispatchTask(t, b, id, fw.url, 0)
	runDue(t, b)
	b.clock.Advance(time.Second)
	runDue(t, b)
	var faults []emulator.DeliveryFault
	for _, d := range b.srv.Deliveries() {
		faults = append(faults, d.Fault)
	}
	require.Equal(t, []emulator.DeliveryFault{emulator.FaultLoseReply, ""}, faults)
	require.Zero(t, b.srv.TaskCount())
	require.True(t, strings.HasPrefix(string(b.srv.Deliveries()[1].ResponseBody), "duplicate"))
}
