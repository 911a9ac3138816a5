package chaos

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// The delivery faults the e2e scenario's emulator suffers. The fault of an
// attempt is keyed to the attempt, not to the order attempts arrive in
// (see deliveryFaults.decide).
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

// plannedDelay is the delay of an attempt given faultDelay by the plan.
const plannedDelay = 100 * time.Millisecond

// errInjectedReset is the error of the body whose read cuts the
// connection in faultReset.
var errInjectedReset = errors.New("injected: connection reset")

// deliveryFaults is the emulator's HTTP transport in the e2e scenario: a
// balancer over the live workers that injects the delivery faults. Workers
// are chosen round-robin: which worker gets an attempt depends on timing,
// what happens to the attempt does not. The emulator counts each attempt
// once, whatever happens here, as Cloud Tasks would.
type deliveryFaults struct {
	base  http.RoundTripper
	emit  func(e2eEvent)
	seed  uint64
	clock clockwork.Clock

	mu      sync.Mutex
	workers []string // live workers' host:port
	next    int
	// arrivals counts how often each attempt reached the transport: the
	// emulator sends one attempt once, so more than one means it
	// re-sent it.
	arrivals map[attemptRef]int
	// pending holds the fault planned for an item (by internal ID) that has
	// not landed yet: every attempt of the item gets it until it lands.
	pending map[string]string
	counts  map[string]int
	// extra2xx counts 2xx answers the emulator never saw: the second
	// delivery of a doubled attempt, the lost ones and the withheld ones.
	extra2xx int
}

// attemptRef names one delivery attempt: the task's internal ID and its
// retry count (X-CloudTasks-TaskRetryCount).
type attemptRef struct {
	id    string
	retry int
}

// newDeliveryFaults returns the transport of a leg: seed keys the drawn
// faults; planned gives the planned faults by internal ID
// (assignDeliveryFaults).
func newDeliveryFaults(seed uint64, planned map[string]string, clock clockwork.Clock, emit func(e2eEvent)) *deliveryFaults {
	pending := make(map[string]string, len(planned))
	for id, kind := range planned {
		pending[id] = kind
	}
	return &deliveryFaults{base: &http.Transport{MaxIdleConnsPerHost: 16}, emit: emit, seed: seed, clock: clock,
		arrivals: map[attemptRef]int{}, pending: pending, counts: map[string]int{}}
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

// setWorkers replaces the list of live workers.
func (f *deliveryFaults) setWorkers(addrs []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workers = append([]string(nil), addrs...)
}

// decide returns the fault of one arrival of an attempt: the item's
// planned fault while it has not landed, otherwise one drawn from the
// seed, the internal ID, the retry count and how often this attempt
// arrived. Neither depends on the order attempts arrive in.
func (f *deliveryFaults) decide(a attemptRef) (fault string, delay time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arrivals[a]++
	if kind, ok := f.pending[a.id]; ok {
		return kind, plannedDelay
	}
	return drawFault(f.seed, a, f.arrivals[a])
}

// drawFault draws the fault of one arrival of an attempt: 4% doubled, 4%
// lost 2xx, 3% reset, 10% delayed up to 300 ms, the rest none.
func drawFault(seed uint64, a attemptRef, arrival int) (fault string, delay time.Duration) {
	h := fnv.New64a()
	_, _ = h.Write([]byte(a.id))
	rng := rand.New(rand.NewPCG(seed^h.Sum64(), uint64(a.retry)<<32|uint64(arrival)))
	switch x := rng.IntN(100); {
	case x < 4:
		fault = faultDupAfter2xx
	case x < 8:
		fault = faultLost2xx
	case x < 11:
		fault = faultReset
	case x < 21:
		fault, delay = faultDelay, time.Duration(rng.IntN(300))*time.Millisecond
	}
	return fault, delay
}

// nextWorker returns the next live worker, "" when none is up.
func (f *deliveryFaults) nextWorker() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.workers) == 0 {
		return ""
	}
	f.next++
	return f.workers[f.next%len(f.workers)]
}

// landed counts a fault that really happened to attempt a and writes it
// to the history; a planned fault is then done with.
func (f *deliveryFaults) landed(a attemptRef, fault string, status int, extra2xx bool) {
	f.mu.Lock()
	f.counts[fault]++
	if extra2xx {
		f.extra2xx++
	}
	if f.pending[a.id] == fault {
		delete(f.pending, a.id)
	}
	f.mu.Unlock()
	f.emit(e2eEvent{Hop: hopEmulator, Op: "fault", ID: a.id, Attempt: a.retry + 1, Status: status, Detail: fault})
}

// snapshot returns the faults that landed and the 2xx answers the emulator
// did not see.
func (f *deliveryFaults) snapshot() (map[string]int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.counts))
	for k, v := range f.counts {
		out[k] = v
	}
	return out, f.extra2xx
}

// unlanded returns the planned faults that have not landed, by internal
// ID.
func (f *deliveryFaults) unlanded() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]string, len(f.pending))
	for k, v := range f.pending {
		out[k] = v
	}
	return out
}

// RoundTrip sends one delivery attempt to a live worker, with its fault.
// A fault counts only once it has happened: a planned one whose attempt
// did not get that far (no worker up, a worker that failed) waits for the
// item's next attempt.
func (f *deliveryFaults) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	a := attemptRef{id: req.Header.Get("Idempotency-Key")}
	if a.retry, err = strconv.Atoi(req.Header.Get("X-CloudTasks-TaskRetryCount")); err != nil {
		return nil, fmt.Errorf("X-CloudTasks-TaskRetryCount %q is not a number", req.Header.Get("X-CloudTasks-TaskRetryCount"))
	}
	fault, delay := f.decide(a)
	if fault == faultDropped {
		f.landed(a, fault, http.StatusOK, false)
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(bytes.NewReader(nil)), Header: http.Header{}, Request: req}, nil
	}
	addr := f.nextWorker()
	if addr == "" {
		return nil, errors.New("no worker is up")
	}
	send := func(addr string, b io.Reader) (*http.Response, error) {
		out := req.Clone(req.Context())
		out.URL.Host, out.Host = addr, ""
		out.Body, out.ContentLength = io.NopCloser(b), int64(len(body))
		return f.base.RoundTrip(out)
	}
	switch fault {
	case faultDelay:
		select {
		case <-f.clock.After(delay):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
		f.landed(a, fault, 0, false)
	case faultReset:
		// Half the body, then the connection goes: the worker reads a
		// short body, the emulator gets no answer.
		resp, err := send(addr, io.MultiReader(bytes.NewReader(body[:len(body)/2]), failingReader{}))
		if err == nil {
			resp.Body.Close()
			return nil, fmt.Errorf("injected: %s, yet the worker answered %d", fault, resp.StatusCode)
		}
		if errors.Is(err, errInjectedReset) {
			f.landed(a, fault, 0, false)
		}
		return nil, fmt.Errorf("injected: %s: %w", fault, err)
	}
	resp, err := send(addr, bytes.NewReader(body))
	if err != nil || resp.StatusCode/100 != 2 {
		return resp, err
	}
	switch fault {
	case faultDupAfter2xx:
		again, err := send(f.otherWorker(addr), bytes.NewReader(body))
		if err != nil {
			// The second delivery did not happen. The first 2xx is kept
			// from the emulator, so the item's next attempt meets its
			// planned fault again: it is the 2xx that is lost here.
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			f.landed(a, faultLost2xx, resp.StatusCode, true)
			return nil, fmt.Errorf("injected: %s, yet the second delivery failed: %w", fault, err)
		}
		_, _ = io.Copy(io.Discard, again.Body)
		again.Body.Close()
		f.landed(a, fault, again.StatusCode, again.StatusCode/100 == 2)
	case faultLost2xx:
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		f.landed(a, fault, resp.StatusCode, true)
		return nil, errors.New("injected: the worker's 2xx was lost")
	case faultDeadline:
		return nil, f.withhold(req.Context(), a, resp)
	}
	return resp, nil
}

// withhold keeps a worker's 2xx from the emulator until the attempt's
// context ends, which the emulator's dispatch deadline does. The fault
// lands only if it was the deadline.
func (f *deliveryFaults) withhold(ctx context.Context, a attemptRef, resp *http.Response) error {
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	f.emit(e2eEvent{Hop: hopEmulator, Op: "withhold", ID: a.id, Attempt: a.retry + 1, Status: resp.StatusCode})
	<-ctx.Done()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		f.landed(a, faultDeadline, resp.StatusCode, true)
	} else {
		f.mu.Lock()
		f.extra2xx++
		f.mu.Unlock()
	}
	return fmt.Errorf("injected: the worker's %d withheld until the attempt ended: %w", resp.StatusCode, ctx.Err())
}

// otherWorker returns a live worker other than addr when there is one.
func (f *deliveryFaults) otherWorker(addr string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.workers {
		if w != addr {
			return w
		}
	}
	return addr
}

// failingReader fails the read of a request body, which makes the
// transport drop the connection.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errInjectedReset }
