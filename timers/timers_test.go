package timers_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/timers"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func TestBackoffDue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		b    timers.Backoff
		n    uint64
		want time.Time
	}{
		{"defaults, attempt 1", timers.Backoff{}, 1, t0.Add(10 * time.Second)},
		{"defaults, attempt 3", timers.Backoff{}, 3, t0.Add(40 * time.Second)},
		{"defaults, capped", timers.Backoff{}, 20, t0.Add(time.Hour)},
		{"to the second", timers.Backoff{Initial: 1500 * time.Millisecond, Multiplier: 1}, 1, t0.Add(time.Second)},
		{"multiplier 3", timers.Backoff{Initial: time.Minute, Max: 24 * time.Hour, Multiplier: 3}, 3, t0.Add(9 * time.Minute)},
	}
	for _, tt := range tests {
		got, err := tt.b.Due(t0, tt.n)
		require.NoError(t, err, tt.name)
		require.Equal(t, tt.want, got, tt.name)
	}
}

func TestBackoffRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		b    timers.Backoff
		n    uint64
		want string
	}{
		{timers.Backoff{}, 0, "timers: attempt 0 has no retry delay; attempts are numbered from 1"},
		{timers.Backoff{Initial: -time.Second}, 1, "timers: Backoff.Initial -1s is negative"},
		{timers.Backoff{Initial: time.Hour, Max: time.Minute}, 1, "timers: Backoff.Max 1m0s is below Backoff.Initial 1h0m0s"},
		{timers.Backoff{Multiplier: 0.5}, 1, "timers: Backoff.Multiplier 0.5 is not a number of at least 1"},
	}
	for _, tt := range tests {
		_, err := tt.b.Delay(tt.n)
		require.EqualError(t, err, tt.want)
	}
}

func TestHeartbeatNext(t *testing.T) {
	t.Parallel()
	h := timers.Heartbeat{Every: 30 * time.Second}
	for _, tt := range []struct {
		after time.Duration
		want  time.Duration
	}{{0, 30 * time.Second}, {29 * time.Second, 30 * time.Second}, {30 * time.Second, time.Minute}, {95 * time.Second, 2 * time.Minute}} {
		got, err := h.Next(t0, t0.Add(tt.after))
		require.NoError(t, err)
		require.Equal(t, t0.Add(tt.want), got, "after %s", tt.after)
	}
	_, err := timers.Heartbeat{Every: time.Millisecond}.Next(t0, t0)
	require.EqualError(t, err, "timers: Heartbeat.Every 1ms is below 1s; checks are named to the second")
	_, err = h.Next(t0.Add(time.Hour), t0)
	require.EqualError(t, err, "timers: started 2026-01-01T13:00:00Z is after 2026-01-01T12:00:00Z")
}

func TestArm(t *testing.T) {
	t.Parallel()
	near := t0.Add(10 * 24 * time.Hour)
	at, rearm := timers.Arm(near, t0)
	require.Equal(t, near, at)
	require.False(t, rearm)
	at, rearm = timers.Arm(t0.Add(90*24*time.Hour), t0)
	require.Equal(t, t0.Add(timers.MaxAhead-time.Minute), at)
	require.True(t, rearm)
	at, rearm = timers.Arm(t0.Add(timers.MaxAhead), t0)
	require.Equal(t, t0.Add(timers.MaxAhead), at)
	require.False(t, rearm)
}
