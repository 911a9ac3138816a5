package cloudtasks

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// OnRetry hears of every retry, with the method, the failed call's number
// and the wait, before the wait; the last failure is not retried.
func TestOnRetryReportsEachRetry(t *testing.T) {
	t.Parallel()
	var got []RetryEvent
	d := &Dispatcher{cfg: Config{OnRetry: func(ev RetryEvent) { ev.Err = nil; got = append(got, ev) }}}
	p := RetryPolicy{Initial: time.Second, Max: time.Second, Multiplier: 1, MaxCalls: 3}
	clock := clockwork.NewFakeClock()
	start := clock.Now()
	calls, _ := p.retry(context.Background(), clock, func() float64 { return 0 }, d.onRetry("GetTask"), func(context.Context) error {
		return status.Error(codes.Unavailable, "down")
	})
	require.Equal(t, 3, calls)
	require.Equal(t, 2*time.Second, clock.Since(start), "the fake clock moved by the waits")
	require.Equal(t, []RetryEvent{
		{Method: "GetTask", Call: 1, MaxCalls: 3, Code: codes.Unavailable, Delay: time.Second},
		{Method: "GetTask", Call: 2, MaxCalls: 3, Code: codes.Unavailable, Delay: time.Second},
	}, got)
	require.Nil(t, (&Dispatcher{}).onRetry("GetTask"), "no hook, no wrapper")
}
