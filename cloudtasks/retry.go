package cloudtasks

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ctdispatch/ctdispatch/timers"
)

// codeOf returns the gRPC code of err; context errors map to Canceled and
// DeadlineExceeded.
func codeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	return codes.Unknown
}

// transient reports whether a call that failed with code may succeed when
// repeated. Repeating CreateTask is safe only because every task is named:
// a repeat of a call that did create the task gets AlreadyExists.
func transient(code codes.Code) bool {
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal:
		return true
	}
	return false
}

// delay returns the wait before call n+1 (n ≥ 1 calls made so far): the
// exponential delay timers.Backoff names retry timers with, less the
// jittered part. u is a uniform random number in [0, 1) that scales it.
// Config.validate refuses every policy timers.Backoff does; one that was
// not validated waits Max where Backoff refuses it.
func (p RetryPolicy) delay(n int, u float64) time.Duration {
	d, err := timers.Backoff{Initial: p.Initial, Max: p.Max, Multiplier: p.Multiplier}.Delay(uint64(n))
	if err != nil {
		d = p.Max
	}
	return time.Duration(float64(d) * (1 - p.Jitter*u))
}

// advancer is a fake clock: one that moves only when told to.
type advancer interface{ Advance(time.Duration) }

// sleep waits d on clock, or returns the context's error if it ends first.
// A fake clock (see Config.Clock) is advanced by d instead: nobody else
// may move it, and a test should not hang on a retry it did not plan for.
func sleep(ctx context.Context, clock clockwork.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	if fake, ok := clock.(advancer); ok {
		fake.Advance(d)
		return ctx.Err()
	}
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RetryEvent describes a transient failure about to be retried, for
// Config.OnRetry.
type RetryEvent struct {
	// Method is the RPC: CreateTask, GetTask or DeleteTask.
	Method string
	// Call is the number of the call that failed (1 for the first).
	Call int
	// MaxCalls is the policy's bound on calls.
	MaxCalls int
	// Code is the failure's gRPC code and Err the failure.
	Code codes.Code
	Err  error
	// Delay is the wait before the next call.
	Delay time.Duration
}

// onRetry returns the hook that reports method's retries to
// Config.OnRetry, or nil when none is set.
func (d *Dispatcher) onRetry(method string) func(RetryEvent) {
	if d.cfg.OnRetry == nil {
		return nil
	}
	return func(ev RetryEvent) {
		ev.Method = method
		d.cfg.OnRetry(ev)
	}
}

// try is one call of a retried operation: its number (1 for the first)
// and the wait before it (0 for the first), as its span records them.
type try struct {
	n       int
	backoff time.Duration
}

// retry calls fn until it succeeds, fails with a code that is not
// transient, the policy's MaxCalls is reached, ctx ends, or MaxElapsed has
// passed since the first call (no call starts after it; zero: no bound). It
// returns the number of calls made and the last error. notify, if not nil,
// hears of each retry before its wait.
//
// MaxElapsed is checked on clock rather than set as a context deadline: a
// deadline costs a runtime timer per call, and each attempt is bounded by
// the client's own timeout anyway.
func (p RetryPolicy) retry(ctx context.Context, clock clockwork.Clock, rnd func() float64, notify func(RetryEvent), fn func(context.Context, try) error) (int, error) {
	end := clock.Now().Add(p.MaxElapsed)
	calls := 0
	var backoff time.Duration
	for {
		calls++
		err := fn(ctx, try{n: calls, backoff: backoff})
		if err == nil || !transient(codeOf(err)) || calls >= p.MaxCalls || ctx.Err() != nil {
			return calls, err
		}
		delay := p.delay(calls, rnd())
		if left := end.Sub(clock.Now()); p.MaxElapsed > 0 && delay >= left {
			return calls, err
		}
		if notify != nil {
			notify(RetryEvent{Call: calls, MaxCalls: p.MaxCalls, Code: codeOf(err), Err: err, Delay: delay})
		}
		if serr := sleep(ctx, clock, delay); serr != nil {
			return calls, err
		}
		backoff = delay
	}
}

// call makes a Cloud Tasks call of method under the retry policy, each
// try in its attempt span, in which the code fine (NotFound for a GetTask,
// say) is an answer rather than an error. It returns the calls made and
// the last error.
func (d *Dispatcher) call(ctx context.Context, method string, fine codes.Code, fn func(context.Context) error) (int, error) {
	return d.cfg.Retry.retry(ctx, d.clock, rand.Float64, d.onRetry(method), func(ctx context.Context, t try) error {
		return d.attempt(ctx, method, t, fine, fn)
	})
}
