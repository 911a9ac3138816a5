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

// The retry loop's delay math and waits, which the exported API shows only
// through OnRetry events with a random jitter (see config_test.go).

func TestRetryPolicyDelay(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.5}
	var full, jittered []time.Duration
	for n := 1; n <= 6; n++ {
		full = append(full, p.delay(n, 0))
		jittered = append(jittered, p.delay(n, 1))
	}
	require.Equal(t, []time.Duration{100e6, 200e6, 400e6, 800e6, 1e9, 1e9}, full)
	require.Equal(t, []time.Duration{50e6, 100e6, 200e6, 400e6, 500e6, 500e6}, jittered)
}

func TestRetryWaitsOnTheClock(t *testing.T) {
	t.Parallel()
	// A fake clock is advanced by each wait: the calls are made at the
	// times the policy says, and the test does not move the clock.
	clock := clockwork.NewFakeClock()
	start := clock.Now()
	p := RetryPolicy{Initial: time.Second, Max: 4 * time.Second, Multiplier: 2, Jitter: 0, MaxCalls: 4}
	var at []time.Duration
	_, err := p.retry(context.Background(), clock, func() float64 { return 0 }, nil, func(context.Context) error {
		at = append(at, clock.Since(start))
		return status.Error(codes.Unavailable, "down")
	})
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.Equal(t, []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second}, at)

	// A permanent code stops at once; an ended context stops the retries.
	ctx, cancel := context.WithCancel(context.Background())
	calls2, err := p.retry(ctx, clock, func() float64 { return 0 }, nil, func(context.Context) error {
		cancel()
		return status.Error(codes.Unavailable, "down")
	})
	require.Equal(t, 1, calls2)
	require.Equal(t, codes.Unavailable, status.Code(err))
	calls3, err := p.retry(context.Background(), clock, func() float64 { return 0 }, nil, func(context.Context) error {
		return status.Error(codes.InvalidArgument, "bad")
	})
	require.Equal(t, 1, calls3)
	require.Equal(t, codes.InvalidArgument, status.Code(err))

	// MaxElapsed: after 1s the next wait (2s) would end past 2.5s, so the
	// loop stops at 2 calls.
	p.MaxElapsed = 2500 * time.Millisecond
	calls4, err := p.retry(context.Background(), clock, func() float64 { return 0 }, nil, func(context.Context) error {
		return status.Error(codes.Unavailable, "down")
	})
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.Equal(t, 2, calls4)
}

// A real clock is waited on: the sleep ends when its timer fires or the
// context ends.
func TestSleepOnARealClockEndsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, sleep(ctx, clockwork.NewRealClock(), time.Hour), context.Canceled)
	require.NoError(t, sleep(context.Background(), clockwork.NewRealClock(), time.Microsecond))
}
