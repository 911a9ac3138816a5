package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"cloud.google.com/go/cloudtasks/apiv2/cloudtaskspb"
	"github.com/jonboulle/clockwork"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The outcome of a delivery attempt, as recorded in Delivery.Outcome.
const (
	OutcomeSucceeded = "succeeded" // 2xx: the task was deleted
	OutcomeRetry     = "retry"     // failed; the task is scheduled again
	OutcomeExhausted = "exhausted" // failed and out of retries: the task was deleted
	OutcomeDeleted   = "deleted"   // the task was deleted while the attempt ran
)

// Delivery is one attempt to deliver a task, with what was sent and what
// came back.
type Delivery struct {
	// Queue and Task are full resource names.
	Queue, Task string
	// Attempt counts from 1 (the task's dispatch_count for this attempt).
	Attempt int32
	// Method, URL, Header and Body are the request as sent.
	Method, URL string
	Header      http.Header
	Body        []byte
	// ScheduleTime, DispatchTime and ResponseTime come from the clock.
	ScheduleTime, DispatchTime, ResponseTime time.Time
	// StatusCode is the worker's HTTP status, 0 when there was no response.
	StatusCode int
	// ResponseBody is the start of the worker's answer (at most 4 KiB).
	ResponseBody []byte
	// Err describes a failure without a response (timeout, refused).
	Err string
	// Outcome is one of the Outcome… constants.
	Outcome string
	// Fault is the delivery fault that happened to the attempt
	// (Config.DeliveryFaults), "" for none. StatusCode and ResponseBody are
	// then what the emulator got: the second answer of FaultDeliverTwice,
	// none for FaultLoseReply, FaultReset and FaultWithhold, its own 200
	// for FaultDrop.
	Fault DeliveryFault
}

// errDeadline marks an attempt the worker did not answer within the
// task's dispatch deadline.
var errDeadline = errors.New("dispatch deadline exceeded")

func durationOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// loop delivers due tasks until ctx ends, sleeping on the clock until the
// next task is due or something changes.
func (s *Server) loop(ctx context.Context) {
	for {
		s.mu.Lock()
		now := s.clock.Now()
		_, next := s.dispatchDueLocked(now)
		s.mu.Unlock()
		var timer clockwork.Timer
		var fire <-chan time.Time
		if !next.IsZero() {
			timer = s.clock.NewTimer(next.Sub(now))
			fire = timer.Chan()
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-s.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// dispatchDueLocked starts every attempt that is due and allowed by its
// queue's state and rate limits. It returns how many it started and the
// earliest time another may become possible (zero: only an event can).
func (s *Server) dispatchDueLocked(now time.Time) (started int, next time.Time) {
	if s.closed || s.cfg.DisableDelivery {
		return 0, time.Time{}
	}
	nowNanos := now.UnixNano()
	for _, q := range s.queues {
		if q.pb.State != cloudtaskspb.Queue_RUNNING {
			continue
		}
		q.refill(now)
		for len(q.pending) > 0 {
			t := q.pending[0]
			if t.schedule > nowNanos {
				next = earliest(next, time.Unix(0, t.schedule))
				break
			}
			if s.expiredLocked(t, now) {
				continue
			}
			if q.running >= q.pb.RateLimits.MaxConcurrentDispatches {
				break // an attempt finishing wakes the loop
			}
			if q.tokens < 1 {
				wait := time.Duration((1 - q.tokens) / q.pb.RateLimits.MaxDispatchesPerSecond * float64(time.Second))
				next = earliest(next, now.Add(max(wait, time.Microsecond)))
				break
			}
			q.tokens--
			q.unschedule(t)
			s.startAttemptLocked(t, now)
			started++
		}
	}
	return started, next
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// attempt is what one delivery needs, captured under the lock.
type attempt struct {
	t        *task
	req      *http.Request
	deadline time.Duration
	rec      Delivery
}

// startAttemptLocked marks t as running and sends it in the background.
func (s *Server) startAttemptLocked(t *task, now time.Time) {
	p := t.pb
	p.DispatchCount++
	nowPB := timestamppb.New(now)
	schedPB := timestamppb.New(time.Unix(0, t.schedule))
	if p.FirstAttempt == nil {
		p.FirstAttempt = &cloudtaskspb.Attempt{DispatchTime: nowPB}
	}
	p.LastAttempt = &cloudtaskspb.Attempt{ScheduleTime: schedPB, DispatchTime: nowPB}
	t.running++
	t.q.running++
	if s.inflight == 0 {
		s.idle = make(chan struct{})
	}
	s.inflight++

	a := &attempt{t: t, deadline: defaultDeadline}
	if p.DispatchDeadline != nil {
		a.deadline = p.DispatchDeadline.AsDuration()
	}
	a.req, a.rec = s.requestLocked(t, now)
	go s.deliver(a)
}

// deliver sends one attempt and records its result.
func (s *Server) deliver(a *attempt) {
	code, retryAfter, err := s.send(a)
	s.finish(a, code, retryAfter, err)
}

func (s *Server) send(a *attempt) (code int, retryAfter time.Duration, err error) {
	if a.req == nil {
		return 0, 0, errors.New("request could not be built")
	}
	ctx, cancel := clockwork.WithTimeout(s.ctx, s.clock, a.deadline)
	defer cancel()
	resp, fault, err := s.do(ctx, a)
	a.rec.Fault = fault
	if err != nil {
		// A fake clock's context may block in Err until its deadline, so
		// Err is asked only once Done says the context has ended.
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return 0, 0, fmt.Errorf("%w of %s", errDeadline, a.deadline)
			}
		default:
		}
		return 0, 0, err
	}
	a.rec.ResponseBody, _ = io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), s.clock.Now())
	}
	return resp.StatusCode, retryAfter, nil
}

func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// finish applies an attempt's result to its task: delete on success or
// exhaustion, otherwise schedule the retry with the queue's backoff.
func (s *Server) finish(a *attempt, code int, retryAfter time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	t, p := a.t, a.t.pb
	t.running--
	t.q.running--
	a.rec.ResponseTime, a.rec.StatusCode = now, code
	if err != nil {
		a.rec.Err = err.Error()
	}
	switch {
	case t.removed:
		a.rec.Outcome = OutcomeDeleted
	case code >= 200 && code < 300:
		a.rec.Outcome = OutcomeSucceeded
		s.removeTaskLocked(t, now)
	default:
		last := &cloudtaskspb.Attempt{ScheduleTime: p.LastAttempt.GetScheduleTime(), DispatchTime: p.LastAttempt.GetDispatchTime()}
		if code != 0 {
			p.ResponseCount++
			last.ResponseTime = timestamppb.New(now)
			last.ResponseStatus = httpStatusCode(code)
			if code < 500 {
				t.executions++
			}
			t.prevResponse = int32(code)
			t.retryReason = "HTTP_STATUS_" + strconv.Itoa(code)
		} else {
			t.retryReason = "NO_RESPONSE"
			if errors.Is(err, errDeadline) {
				t.retryReason = "DEADLINE_EXCEEDED"
			}
		}
		p.LastAttempt = last
		pol := effectiveRetry(t.q.pb.RetryConfig, p.RetryConfig)
		first := p.FirstAttempt.GetDispatchTime().AsTime()
		if pol.exhausted(p.DispatchCount, first, time.Unix(0, t.created), now) {
			a.rec.Outcome = OutcomeExhausted
			s.removeTaskLocked(t, now)
			break
		}
		a.rec.Outcome = OutcomeRetry
		if t.running > 0 {
			break // the attempt still in flight decides what happens next
		}
		delay := max(pol.backoff(p.DispatchCount-1), retryAfter)
		t.schedule = now.Add(delay).UnixNano()
		t.q.push(t)
	}
	s.recordLocked(a.rec)
	s.log.Debug("delivery", "task", p.Name, "attempt", a.rec.Attempt, "status", code, "error", a.rec.Err, "outcome", a.rec.Outcome)
	s.inflight--
	if s.inflight == 0 {
		close(s.idle)
	}
	s.poke()
}

func (s *Server) recordLocked(d Delivery) {
	if s.cfg.DeliveryLogLimit == 0 {
		return
	}
	if len(s.deliveries) >= s.cfg.DeliveryLogLimit {
		n := copy(s.deliveries, s.deliveries[1:])
		s.deliveries = s.deliveries[:n]
	}
	s.deliveries = append(s.deliveries, d)
}

// Deliveries returns every recorded delivery attempt, oldest first.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.deliveries...)
}

// ClearDeliveries forgets the recorded delivery attempts.
func (s *Server) ClearDeliveries() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliveries = nil
}

// RunDue delivers every task that is due at the clock's current time and
// allowed by its queue, waits until no attempt is in flight, and repeats
// until nothing more is due. It returns how many attempts it started.
// Tests advance a fake clock, then call RunDue instead of sleeping.
func (s *Server) RunDue(ctx context.Context) (int, error) {
	total := 0
	for {
		s.mu.Lock()
		n, _ := s.dispatchDueLocked(s.clock.Now())
		s.mu.Unlock()
		total += n
		busy, err := s.waitIdle(ctx)
		if err != nil {
			return total, err
		}
		if n == 0 && !busy {
			return total, nil
		}
	}
}

// waitIdle waits until no attempt is in flight; busy reports whether any was.
func (s *Server) waitIdle(ctx context.Context) (busy bool, err error) {
	s.mu.Lock()
	ch := s.idle
	n := s.inflight
	s.mu.Unlock()
	if n == 0 {
		return false, nil
	}
	select {
	case <-ch:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}
