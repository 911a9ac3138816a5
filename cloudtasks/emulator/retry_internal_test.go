package emulator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffFollowsTheDocumentedExample(t *testing.T) {
	t.Parallel()
	// The RetryConfig docs: min 10s, max 300s, 3 doublings retry at
	// 10s, 20s, 40s, 80s, 160s, 240s, 300s, 300s.
	p := retryPolicy{minBackoff: 10 * time.Second, maxBackoff: 300 * time.Second, maxDoublings: 3}
	var got []time.Duration
	for n := range int32(8) {
		got = append(got, p.backoff(n))
	}
	s := time.Second
	require.Equal(t, []time.Duration{10 * s, 20 * s, 40 * s, 80 * s, 160 * s, 240 * s, 300 * s, 300 * s}, got)
}

func TestExhausted(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		p        retryPolicy
		attempts int32
		elapsed  time.Duration
		want     bool
	}{
		{"attempts used, no duration", retryPolicy{maxAttempts: 3}, 3, time.Second, true},
		{"attempts left", retryPolicy{maxAttempts: 3}, 2, time.Hour, false},
		{"attempts used, duration left", retryPolicy{maxAttempts: 3, maxRetryDuration: time.Hour}, 5, time.Minute, false},
		{"both used", retryPolicy{maxAttempts: 3, maxRetryDuration: time.Hour}, 5, time.Hour, true},
		{"unlimited attempts, duration used", retryPolicy{maxAttempts: -1, maxRetryDuration: time.Hour}, 1000, time.Hour, true},
		{"unlimited attempts, duration left", retryPolicy{maxAttempts: -1, maxRetryDuration: time.Hour}, 1000, time.Minute, false},
		{"both unlimited", retryPolicy{maxAttempts: -1}, 100000, 30 * 24 * time.Hour, false},
		{"retention", retryPolicy{maxAttempts: -1}, 100000, 31 * 24 * time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.p.exhausted(tt.attempts, t0, t0, t0.Add(tt.elapsed)))
		})
	}
}
