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
		{"multiplier 1.5, fraction dropped", timers.Backoff{Initial: 7 * time.Second, Multiplier: 1.5}, 4, t0.Add(23 * time.Second)},
		{"defaults, last attempt under the cap", timers.Backoff{}, 9, t0.Add(42*time.Minute + 40*time.Second)},
		{"defaults, first attempt at the cap", timers.Backoff{}, 10, t0.Add(time.Hour)},
		{"beyond float range", timers.Backoff{}, 1 << 62, t0.Add(time.Hour)},
		{"no growth", timers.Backoff{Initial: 45 * time.Second, Multiplier: 1}, 1000, t0.Add(45 * time.Second)},
	}
	for _, tt := range tests {
		got, err := tt.b.Due(t0, tt.n)
		require.NoError(t, err, tt.name)
		require.Equal(t, tt.want, got, tt.name)
	}
	// A failure at a fraction of a second: the due time is named to the
	// second, so the fraction is dropped after the delay is added.
	got, err := timers.Backoff{}.Due(t0.Add(2600*time.Millisecond), 2)
	require.NoError(t, err)
	require.Equal(t, t0.Add(22*time.Second), got)
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
	at := func(clock string) time.Time {
		tm, err := time.Parse("15:04:05.999", clock)
		require.NoError(t, err)
		return time.Date(2026, 1, 1, tm.Hour(), tm.Minute(), tm.Second(), tm.Nanosecond(), time.UTC)
	}
	tests := []struct {
		name    string
		every   time.Duration
		started string
		after   string
		want    string
	}{
		{"at the start", 30 * time.Second, "12:00:00", "12:00:00", "12:00:30"},
		{"before the first check", 30 * time.Second, "12:00:00", "12:00:29", "12:00:30"},
		{"at a check", 30 * time.Second, "12:00:00", "12:00:30", "12:01:00"},
		{"between checks", 30 * time.Second, "12:00:00", "12:01:35", "12:02:00"},
		// A start with a fraction: the checks fall at .5 and are named to
		// the second, so the one named after is not after it.
		{"fractional start, at the start", 30 * time.Second, "12:00:00.5", "12:00:00.5", "12:00:30"},
		{"fractional start, at a named check", 30 * time.Second, "12:00:00.5", "12:00:30", "12:01:00"},
		{"fractional start, inside the named second", 30 * time.Second, "12:00:00.5", "12:00:30.2", "12:01:00"},
		{"fractional start, at the exact check", 30 * time.Second, "12:00:00.5", "12:00:30.5", "12:01:00"},
		{"fractional start, before a check", 30 * time.Second, "12:00:00.5", "12:00:29.9", "12:00:30"},
		{"fractional every", 1500 * time.Millisecond, "12:00:00", "12:00:01", "12:00:03"},
		{"one second, fractional start", time.Second, "12:00:00.999", "12:00:01", "12:00:02"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := timers.Heartbeat{Every: tt.every}.Next(at(tt.started), at(tt.after))
			require.NoError(t, err)
			require.Equal(t, at(tt.want), got)
			require.True(t, got.After(at(tt.after)), "strictly after")
			require.Zero(t, got.Nanosecond(), "a whole second, as the check is named")
		})
	}
}

func TestHeartbeatNextRefuses(t *testing.T) {
	t.Parallel()
	_, err := timers.Heartbeat{Every: time.Millisecond}.Next(t0, t0)
	require.EqualError(t, err, "timers: Heartbeat.Every 1ms is below 1s; checks are named to the second")
	_, err = timers.Heartbeat{Every: 30 * time.Second}.Next(t0.Add(time.Hour), t0)
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
