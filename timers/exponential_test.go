package timers

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestExponential(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		initial    time.Duration
		max        time.Duration
		multiplier float64
		n          uint64
		want       time.Duration
	}{
		{"first", 10 * time.Second, time.Hour, 2, 1, 10 * time.Second},
		{"third", 10 * time.Second, time.Hour, 2, 3, 40 * time.Second},
		{"at the cap", 10 * time.Second, 40 * time.Second, 2, 3, 40 * time.Second},
		{"over the cap", 10 * time.Second, time.Hour, 2, 20, time.Hour},
		{"fractional multiplier", 7 * time.Second, time.Hour, 1.5, 4, 23625 * time.Millisecond},
		{"no growth", 45 * time.Second, time.Hour, 1, 1000, 45 * time.Second},
		{"beyond float range", 50 * time.Millisecond, 5 * time.Second, 2, math.MaxUint64, 5 * time.Second},
		{"zero initial", 0, time.Second, 2, 5, 0},
		{"n 0 is taken as the first", 10 * time.Second, time.Hour, 2, 0, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, exponential(tt.initial, tt.max, tt.multiplier, tt.n))
		})
	}
}
