package emulator

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A draw depends on the seed, the task and the attempt only, meets each
// fault at about its rate, and a drawn delay lasts less than Delay.
func TestDrawDeliveryFault(t *testing.T) {
	t.Parallel()
	f := DeliveryFaults{Seed: 42, Delay: 300 * time.Millisecond, Rates: map[DeliveryFault]float64{
		FaultDeliverTwice: 0.04, FaultLoseReply: 0.04, FaultReset: 0.03, FaultDelay: 0.10,
	}}
	counts := map[DeliveryFault]int{}
	for k := range 2500 {
		for attempt := int32(1); attempt <= 4; attempt++ {
			a := attemptRef{task: fmt.Sprintf("projects/p/locations/l/queues/q/tasks/t%d", k), attempt: attempt}
			fault, delay := drawDeliveryFault(f, a)
			again, delayAgain := drawDeliveryFault(f, a)
			require.Equal(t, []any{fault, delay}, []any{again, delayAgain}, a)
			if fault == FaultDelay {
				require.True(t, delay >= 0 && delay < f.Delay, "delay %s", delay)
			} else {
				require.Zero(t, delay)
			}
			counts[fault]++
		}
	}
	// About 4%, 4%, 3% and 10% of 10,000.
	require.Equal(t, map[DeliveryFault]int{"": 7824, FaultDeliverTwice: 418, FaultLoseReply: 419, FaultReset: 321, FaultDelay: 1018}, counts)

	f.Seed = 43
	other := 0
	for k := range 100 {
		a := attemptRef{task: fmt.Sprintf("projects/p/locations/l/queues/q/tasks/t%d", k), attempt: 1}
		f42 := f
		f42.Seed = 42
		x, _ := drawDeliveryFault(f, a)
		y, _ := drawDeliveryFault(f42, a)
		if x != y {
			other++
		}
	}
	require.NotZero(t, other, "another seed draws other faults")
}
