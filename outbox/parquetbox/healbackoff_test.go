package parquetbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The retries of an unwritable log come soon at first, the bound doubling
// to 10s; each pause is drawn up to its bound, and a fresh value starts
// again at 100ms.
func TestHealBackoffBounds(t *testing.T) {
	t.Parallel()
	bounds := []time.Duration{100e6, 200e6, 400e6, 800e6, 1600e6, 3200e6, 6400e6, 10e9, 10e9, 10e9}
	for round := range 20 {
		var b healBackoff
		for i, bound := range bounds {
			d := b.pause()
			require.True(t, d > 0 && d <= bound, "round %d, pause %d: %s, want in (0, %s]", round, i+1, d, bound)
		}
		b = healBackoff{}
		require.LessOrEqual(t, b.pause(), bounds[0])
	}
}
