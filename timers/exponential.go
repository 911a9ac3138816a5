package timers

import (
	"math"
	"time"
)

// exponential returns the delay before the retry that follows try n (1
// for the first): initial·multiplier^(n-1), capped at max. It is the
// module's one exponential delay: Backoff.Delay names retry timers with
// it, and the dispatcher's retry policy reaches it through Backoff too,
// adding jitter on top. It does not validate: Backoff.Delay checks that
// initial ≥ 0, max ≥ initial and multiplier ≥ 1 and names the field in
// its error. A product beyond what a float holds is capped too.
func exponential(initial, max time.Duration, multiplier float64, n uint64) time.Duration {
	if n == 0 {
		return initial
	}
	d := float64(initial) * math.Pow(multiplier, float64(n-1))
	if !(d < float64(max)) { // also catches +Inf and NaN
		return max
	}
	return time.Duration(d)
}
