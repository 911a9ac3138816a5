package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// The delivery faults the e2e scenario's emulator suffers, drawn per
// attempt in the order attempts arrive.
const (
	faultDupAfter2xx = "delivered twice after a 2xx"
	faultLost2xx     = "2xx lost"
	faultDelay       = "delayed (reordered)"
	faultReset       = "connection reset mid-request"
	// faultDropped is a planted fault: the attempt is answered 200 without
	// reaching a worker. Only a mutation test plans it.
	faultDropped = "answered 200 without delivery (planted)"
)

// deliveryFaults is the emulator's HTTP transport in the e2e scenario: a
// balancer over the live workers (each attempt goes to the next one) that
// injects the delivery faults. The emulator counts each attempt once,
// whatever happens here, as Cloud Tasks would.
type deliveryFaults struct {
	base http.RoundTripper
	emit func(e2eEvent)

	mu      sync.Mutex
	rng     *rand.Rand
	workers []string // live workers' host:port
	next    int
	n       int // attempts seen
	counts  map[string]int
	// extra2xx counts 2xx answers the emulator never saw: the second
	// delivery of a doubled attempt and the lost ones.
	extra2xx int
	// dropOnce plants faultDropped on the first attempt.
	dropOnce bool
}

func newDeliveryFaults(seed uint64, emit func(e2eEvent)) *deliveryFaults {
	return &deliveryFaults{base: &http.Transport{MaxIdleConnsPerHost: 16}, emit: emit,
		rng: rand.New(rand.NewPCG(seed, 0xde1)), counts: map[string]int{}}
}

// setWorkers replaces the list of live workers.
func (f *deliveryFaults) setWorkers(addrs []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workers = append([]string(nil), addrs...)
}

// pick returns the next live worker and the fault for this attempt.
func (f *deliveryFaults) pick() (addr, fault string, delay time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dropOnce {
		f.dropOnce = false
		f.counts[faultDropped]++
		return "", faultDropped, 0
	}
	f.n++
	// The first attempts meet each kind once, so every kind lands in any
	// run; the rest are drawn.
	if first := map[int]string{3: faultDupAfter2xx, 6: faultLost2xx, 9: faultReset, 12: faultDelay}[f.n]; first != "" {
		fault, delay = first, 100*time.Millisecond
	} else {
		fault, delay = f.draw()
	}
	if len(f.workers) == 0 {
		return "", fault, delay
	}
	f.next++
	return f.workers[f.next%len(f.workers)], fault, delay
}

// draw draws the fault of one attempt: 4% doubled, 4% lost 2xx, 3% reset,
// 10% delayed up to 300 ms.
func (f *deliveryFaults) draw() (fault string, delay time.Duration) {
	switch x := f.rng.IntN(100); {
	case x < 4:
		fault = faultDupAfter2xx
	case x < 8:
		fault = faultLost2xx
	case x < 11:
		fault = faultReset
	case x < 21:
		fault, delay = faultDelay, time.Duration(f.rng.IntN(300))*time.Millisecond
	}
	return fault, delay
}

func (f *deliveryFaults) count(fault string, extra2xx bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[fault]++
	if extra2xx {
		f.extra2xx++
	}
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

// RoundTrip sends one delivery attempt to a live worker, with the fault
// drawn for it.
func (f *deliveryFaults) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	addr, fault, delay := f.pick()
	id := req.Header.Get("Idempotency-Key")
	if fault == faultDropped {
		f.emit(e2eEvent{Hop: hopEmulator, Op: "fault", ID: id, Detail: fault})
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(bytes.NewReader(nil)), Header: http.Header{}, Request: req}, nil
	}
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
		case <-time.After(delay):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
		f.count(fault, false)
	case faultReset:
		// Half the body, then the connection goes: the worker reads a
		// short body, the emulator gets no answer.
		f.count(fault, false)
		f.emit(e2eEvent{Hop: hopEmulator, Op: "fault", ID: id, Detail: fault})
		resp, err := send(addr, io.MultiReader(bytes.NewReader(body[:len(body)/2]), failingReader{}))
		if err == nil {
			resp.Body.Close()
			return nil, fmt.Errorf("injected: %s, yet the worker answered %d", fault, resp.StatusCode)
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
		ok := err == nil && again.StatusCode/100 == 2
		if err == nil {
			_, _ = io.Copy(io.Discard, again.Body)
			again.Body.Close()
		}
		f.count(fault, ok)
		f.emit(e2eEvent{Hop: hopEmulator, Op: "fault", ID: id, Detail: fault, Status: statusOf(again)})
	case faultLost2xx:
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		f.count(fault, true)
		f.emit(e2eEvent{Hop: hopEmulator, Op: "fault", ID: id, Detail: fault, Status: resp.StatusCode})
		return nil, errors.New("injected: the worker's 2xx was lost")
	}
	return resp, nil
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

func statusOf(r *http.Response) int {
	if r == nil {
		return 0
	}
	return r.StatusCode
}

// failingReader fails the read of a request body, which makes the
// transport drop the connection.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("injected: connection reset") }
