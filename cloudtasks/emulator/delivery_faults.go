package emulator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// DeliveryFault is a fault in the delivery of one attempt of a task: what
// Cloud Tasks, the network or a load balancer can do to it, which a worker
// must survive without running the task's work twice or losing it.
type DeliveryFault string

// The delivery faults. A fault that acts on the worker's 2xx does nothing
// to an attempt answered otherwise: the answer reaches the emulator as it
// came.
const (
	// FaultDeliverTwice sends the attempt again once the worker answered
	// it 2xx, with the same headers and body, as Cloud Tasks may; the
	// emulator gets the second answer. When the second delivery gets no
	// answer, the attempt fails with none, which is FaultLoseReply.
	FaultDeliverTwice DeliveryFault = "deliver_twice"
	// FaultLoseReply loses the worker's 2xx on its way back: the attempt
	// fails without an answer, and the task is delivered again after the
	// queue's backoff, with X-CloudTasks-TaskRetryReason NO_RESPONSE.
	FaultLoseReply DeliveryFault = "lose_reply"
	// FaultReset drops the connection halfway through the request's body:
	// the worker never reads the whole request, and the attempt fails
	// without an answer. An answer the worker sent before it read the body
	// reaches the emulator, and then the fault has not happened.
	FaultReset DeliveryFault = "reset"
	// FaultDelay holds the attempt back for DeliveryFaults.Delay on the
	// emulator's clock before it is sent, so that later attempts overtake
	// it. The time counts against the attempt's dispatch deadline.
	FaultDelay DeliveryFault = "delay"
	// FaultWithhold keeps the worker's 2xx from the emulator until the
	// attempt's dispatch deadline (the task's dispatch_deadline, 10
	// minutes by default, on the emulator's clock) ends it: the work is
	// done, the emulator records the attempt as failed by its deadline
	// and delivers again with X-CloudTasks-TaskRetryReason
	// DEADLINE_EXCEEDED.
	FaultWithhold DeliveryFault = "withhold"
	// FaultDrop answers the attempt 200 without sending it: the task is
	// deleted, its work never ran. Cloud Tasks does not do this; a proxy
	// in front of a worker can, and an end-to-end check planted with it
	// should report the work as lost.
	FaultDrop DeliveryFault = "drop"
)

// DeliveryFaultKinds returns every delivery fault, in the order a draw
// tries them, in a new slice.
func DeliveryFaultKinds() []DeliveryFault {
	return []DeliveryFault{FaultDeliverTwice, FaultLoseReply, FaultReset, FaultDelay, FaultWithhold, FaultDrop}
}

// DefaultFaultDelay is how long FaultDelay holds an attempt back when
// DeliveryFaults.Delay is zero.
const DefaultFaultDelay = 100 * time.Millisecond

// DeliveryFaults is a plan of faults in the delivery of tasks, for the
// tests of a worker: per task, to make one task's reply get lost or its
// delivery come twice, and as rates, to shake a whole run. A fault is keyed
// to the attempt, never to the order attempts arrive in, so a seed gives
// each attempt the same fault on any machine. Its zero value injects
// nothing.
type DeliveryFaults struct {
	// Seed makes the drawn faults repeatable: an attempt's draw depends on
	// Seed, the task's full name and the attempt's number only.
	Seed uint64 `json:"seed" yaml:"seed"`
	// Rates gives the chance, from 0 to 1, that an attempt of any task
	// meets each fault; they add up to at most 1, and an attempt meets one
	// fault at most. A drawn FaultDelay lasts a duration drawn up to Delay.
	Rates map[DeliveryFault]float64 `json:"rates" yaml:"rates"`
	// Tasks plants a fault on a task, named by its ID (the last part of its
	// name, as X-CloudTasks-TaskName carries it), its full name, or its
	// Idempotency-Key (the internal ID ctdispatch's dispatcher sets). The
	// fault meets every attempt of the task until it has happened once
	// (FaultLoseReply on a task whose worker answers 503 waits for the
	// attempt answered 2xx), and the task draws none from Rates until then;
	// its later attempts draw like any other's.
	Tasks map[string]DeliveryFault `json:"tasks" yaml:"tasks"`
	// Delay is how long FaultDelay holds a task's attempt back. Defaults
	// to DefaultFaultDelay.
	Delay time.Duration `json:"delay" yaml:"delay"`
	// OnFault, when set, is called with each fault as it happens, from
	// the goroutine that sends the attempt, so it must be safe for
	// concurrent use and must not block. FaultDelay and FaultWithhold are
	// reported twice: with Waiting set when the wait on the clock begins
	// (a test on a fake clock advances it then), and once more when the
	// fault has happened.
	OnFault func(DeliveryFaultEvent) `json:"-" yaml:"-"`
}

// DeliveryFaultEvent is a delivery fault that happened to an attempt.
type DeliveryFaultEvent struct {
	// Fault is what happened.
	Fault DeliveryFault
	// Task is the task's full name.
	Task string
	// Key is the attempt's Idempotency-Key, "" when it has none.
	Key string
	// Attempt counts from 1, as Delivery.Attempt.
	Attempt int32
	// Status is the worker's answer that the emulator did not get: the
	// first of a doubled delivery, a lost or a withheld 2xx; 0 when the
	// fault left none.
	Status int
	// Repeat is the answer to the second delivery of FaultDeliverTwice,
	// which the emulator got.
	Repeat int
	// Waiting is set on the first report of FaultDelay and FaultWithhold:
	// the wait on the emulator's clock begins.
	Waiting bool
}

func (f DeliveryFaults) validate() error {
	bad := func(field, value, rule string) error {
		return &ConfigError{Field: "DeliveryFaults." + field, Value: value, Rule: rule}
	}
	var sum float64
	for _, kind := range slices.Sorted(maps.Keys(f.Rates)) {
		r := f.Rates[kind]
		field := fmt.Sprintf("Rates[%s]", kind)
		switch {
		case !slices.Contains(DeliveryFaultKinds(), kind):
			return bad(field, string(kind), kindRule)
		case !(r >= 0 && r <= 1):
			return bad(field, fmt.Sprint(r), "must be between 0 and 1")
		}
		sum += r
	}
	if sum > 1+1e-9 {
		return bad("Rates", fmt.Sprint(sum), "add up to more than 1; an attempt meets one fault at most")
	}
	for _, task := range slices.Sorted(maps.Keys(f.Tasks)) {
		kind := f.Tasks[task]
		switch {
		case task == "":
			return bad(`Tasks[""]`, string(kind), "names no task; give a task ID, a full task name or an Idempotency-Key")
		case !slices.Contains(DeliveryFaultKinds(), kind):
			return bad(fmt.Sprintf("Tasks[%s]", task), string(kind), kindRule)
		}
	}
	if f.Delay < 0 {
		return bad("Delay", f.Delay.String(), "must not be negative")
	}
	return nil
}

// kindRule lists the delivery faults a plan may name.
const kindRule = "is not a delivery fault; allowed: deliver_twice, lose_reply, reset, delay, withhold, drop"

// ParseDeliveryFault reads a delivery fault by its name ("lose_reply"),
// with an error that lists the names.
func ParseDeliveryFault(s string) (DeliveryFault, error) {
	if k := DeliveryFault(s); slices.Contains(DeliveryFaultKinds(), k) {
		return k, nil
	}
	return "", fmt.Errorf("%q %s", s, kindRule)
}

func (f DeliveryFaults) active() bool {
	for _, r := range f.Rates {
		if r > 0 {
			return true
		}
	}
	return len(f.Tasks) > 0
}

// deliveryFaultState decides and injects the delivery faults of a plan.
type deliveryFaultState struct {
	mu sync.Mutex
	f  DeliveryFaults
	// planted holds the Tasks faults that have not happened yet.
	planted map[string]DeliveryFault
}

func newDeliveryFaultState(f DeliveryFaults) *deliveryFaultState {
	s := &deliveryFaultState{}
	s.set(f)
	return s
}

func (s *deliveryFaultState) set(f DeliveryFaults) {
	if f.Delay == 0 {
		f.Delay = DefaultFaultDelay
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f = f
	s.planted = make(map[string]DeliveryFault, len(f.Tasks))
	for k, v := range f.Tasks {
		s.planted[k] = v
	}
}

// attemptRef names one attempt of a task for the faults.
type attemptRef struct {
	task, id, key string // full name, ID, Idempotency-Key
	attempt       int32
}

// decide returns the fault of an attempt: its task's planted fault while it
// has not happened, else one drawn from the seed, the task's name and the
// attempt's number. plant is the Tasks key the fault came from ("" when
// drawn).
func (s *deliveryFaultState) decide(a attemptRef) (fault DeliveryFault, delay time.Duration, plant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.f.active() {
		return "", 0, ""
	}
	for _, k := range []string{a.task, a.id, a.key} {
		if fault, ok := s.planted[k]; ok && k != "" {
			return fault, s.f.Delay, k
		}
	}
	fault, delay = drawDeliveryFault(s.f, a)
	return fault, delay, ""
}

// drawDeliveryFault draws the fault of one attempt from the rates.
func drawDeliveryFault(f DeliveryFaults, a attemptRef) (DeliveryFault, time.Duration) {
	h := fnv.New64a()
	_, _ = h.Write([]byte(a.task))
	rng := rand.New(rand.NewPCG(f.Seed^h.Sum64(), uint64(a.attempt)))
	x := rng.Float64()
	for _, kind := range DeliveryFaultKinds() {
		r := f.Rates[kind]
		if x < r {
			var delay time.Duration
			if kind == FaultDelay && f.Delay > 0 {
				delay = time.Duration(rng.Int64N(int64(f.Delay)))
			}
			return kind, delay
		}
		x -= r
	}
	return "", 0
}

// happened marks a fault as done, so a planted one leaves the plan when it
// is the one planted, and reports it.
func (s *deliveryFaultState) happened(plant string, ev DeliveryFaultEvent) {
	s.mu.Lock()
	if plant != "" && s.planted[plant] == ev.Fault {
		delete(s.planted, plant)
	}
	on := s.f.OnFault
	s.mu.Unlock()
	if on != nil {
		on(ev)
	}
}

// waiting reports that a fault's wait on the clock begins.
func (s *deliveryFaultState) waiting(ev DeliveryFaultEvent) {
	s.mu.Lock()
	on := s.f.OnFault
	s.mu.Unlock()
	if on != nil {
		ev.Waiting = true
		on(ev)
	}
}

// errInjectedReset fails the read of a request body halfway, which makes
// the client drop the connection.
var errInjectedReset = errors.New("delivery fault: connection reset")

type resetReader struct{}

func (resetReader) Read([]byte) (int, error) { return 0, errInjectedReset }

// do sends an attempt's request, with ctx bounding it by the dispatch
// deadline, through the delivery faults. It returns the answer the
// emulator gets and the fault that happened ("" for none).
func (s *Server) do(ctx context.Context, a *attempt) (*http.Response, DeliveryFault, error) {
	req := a.req.WithContext(ctx)
	// The record keeps the header as built, before sendOnce may have
	// renamed the key.
	ref := attemptRef{task: a.rec.Task, key: a.rec.Header.Get("Idempotency-Key"), attempt: a.rec.Attempt}
	ref.id = ref.task[strings.LastIndexByte(ref.task, '/')+1:]
	fault, delay, plant := s.deliveryFaults.decide(ref)
	if fault == "" {
		resp, err := s.cfg.HTTPClient.Do(req)
		return resp, "", err
	}
	ev := DeliveryFaultEvent{Fault: fault, Task: ref.task, Key: ref.key, Attempt: ref.attempt}
	happened := func(ev DeliveryFaultEvent) DeliveryFault {
		s.log.Debug("delivery fault", "fault", ev.Fault, "task", ev.Task, "attempt", ev.Attempt, "status", ev.Status)
		s.deliveryFaults.happened(plant, ev)
		return ev.Fault
	}
	// again is the attempt's request once more, its body fresh.
	again := func(body io.Reader, length int64) *http.Request {
		r := req.Clone(ctx)
		sendOnce(r, a.rec.Body)
		if body != nil {
			r.Body, r.ContentLength = io.NopCloser(body), length
		}
		return r
	}
	switch fault {
	case FaultDrop:
		return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{},
			Body: io.NopCloser(bytes.NewReader(nil)), Request: req}, happened(ev), nil
	case FaultDelay:
		wait := s.clock.After(delay) // before the report, so a test that advances on it wakes it
		s.deliveryFaults.waiting(ev)
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, "", fmt.Errorf("delivery fault: delayed by %s: %w", delay, ctx.Err())
		}
		resp, err := s.cfg.HTTPClient.Do(req)
		return resp, happened(ev), err
	case FaultReset:
		// Half the body, then the connection goes; a request without a
		// body announces one byte, so that its connection goes too.
		body := a.rec.Body
		cut := io.MultiReader(bytes.NewReader(body[:len(body)/2]), resetReader{})
		resp, err := s.cfg.HTTPClient.Do(again(cut, max(int64(len(body)), 1)))
		if err == nil {
			return resp, "", nil // answered before the body was read
		}
		if errors.Is(err, errInjectedReset) {
			// The client's own error names the connection's ports.
			return nil, happened(ev), errors.New("delivery fault: the connection was reset halfway through the request's body")
		}
		return nil, "", err
	}
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil || resp.StatusCode/100 != 2 {
		return resp, "", err
	}
	ev.Status = resp.StatusCode
	discard(resp)
	return s.afterReply(ctx, ev, again, happened)
}

// afterReply carries out ev's fault once the worker has answered 2xx
// (ev.Status): a second delivery, a lost reply, or the reply withheld
// until the attempt ends. again builds the attempt's request anew and
// happened reports the fault.
func (s *Server) afterReply(ctx context.Context, ev DeliveryFaultEvent, again func(io.Reader, int64) *http.Request,
	happened func(DeliveryFaultEvent) DeliveryFault) (*http.Response, DeliveryFault, error) {
	switch ev.Fault {
	case FaultDeliverTwice:
		second, err := s.cfg.HTTPClient.Do(again(nil, 0))
		if err != nil {
			ev.Fault = FaultLoseReply
			return nil, happened(ev), fmt.Errorf("delivery fault: %s: the worker's %d was followed by a second delivery that failed: %w", FaultDeliverTwice, ev.Status, err)
		}
		ev.Repeat = second.StatusCode
		return second, happened(ev), nil
	case FaultLoseReply:
		return nil, happened(ev), fmt.Errorf("delivery fault: the worker's %d was lost", ev.Status)
	default: // FaultWithhold
		s.deliveryFaults.waiting(ev)
		<-ctx.Done()
		err := ctx.Err()
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, happened(ev), fmt.Errorf("delivery fault: the worker's %d withheld past the dispatch deadline: %w", ev.Status, err)
		}
		return nil, "", fmt.Errorf("delivery fault: the worker's %d withheld until the attempt ended: %w", ev.Status, err)
	}
}

// discard reads what is left of an answer the emulator does not get, so
// its connection can serve another attempt.
func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
}
