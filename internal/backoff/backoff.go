// Package backoff is the one exponential delay computation of the module:
// timers.Backoff names retry timers with it (deterministically), and the
// dispatcher's retry policy spaces its calls with it, adding jitter on
// top, and parquetbox draws its retries of an unwritable log at random up
// to it.
package backoff

import (
	"math"
	"time"
)

// Exponential returns the delay before the retry that follows try n (1
// for the first): initial·multiplier^(n-1), capped at max. It does not
// validate: callers check that initial ≥ 0, max ≥ initial and multiplier
// ≥ 1 and name their own fields in the error. A product beyond what a
// float holds is capped too.
func Exponential(initial, max time.Duration, multiplier float64, n uint64) time.Duration {
	if n == 0 {
		return initial
	}
	d := float64(initial) * math.Pow(multiplier, float64(n-1))
	if !(d < float64(max)) { // also catches +Inf and NaN
		return max
	}
	return time.Duration(d)
}
