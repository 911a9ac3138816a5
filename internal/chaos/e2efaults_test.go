package chaos

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/pause"
)

// The PostgreSQL faults are planned at distinct answers within the plan's
// size, two rounds of dropped connections per restart, more with --long.
func TestPlanPGFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n, kills                   int
		terminates, restarts, span int
	}{
		{n: 150, kills: 1, terminates: 2, restarts: 1, span: 150},
		{n: 750, kills: 3, terminates: 6, restarts: 3, span: 750},
		{n: 2, kills: 1, terminates: 2, restarts: 1, span: 4}, // never fewer points than faults
	}
	for _, tt := range tests {
		l := &e2eLeg{n: tt.n, rng: rand.New(rand.NewPCG(7, 1))}
		at := l.planPGFaults(tt.kills)
		kinds := map[string]int{}
		for k, kind := range at {
			require.GreaterOrEqual(t, k, int64(1))
			require.LessOrEqual(t, k, int64(tt.span))
			kinds[kind]++
		}
		require.Equal(t, map[string]int{faultPGTerminate: tt.terminates, faultPGRestart: tt.restarts}, kinds, "n=%d kills=%d", tt.n, tt.kills)
	}
}

// A worker armed with several deliveries reaches its pause point once at
// each: at the first delivery from each armed one on, and only at the
// armed point.
func TestE2EInboxPausesAtEachArmedDelivery(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	in := &e2eInbox{ew: &eventWriter{w: &out, proc: "w"}, pauseAt: []int64{2, 4, 6}, point: pause.E2EWorkerBeforeCommit}
	ctx := context.Background()
	for n := int64(1); n <= 8; n++ {
		in.pause(ctx, n, pause.E2EWorkerAfterCommit, "other") // not the armed point
		if n == 4 {
			continue // delivery 4 is a duplicate that never reaches the point
		}
		in.pause(ctx, n, pause.E2EWorkerBeforeCommit, string(rune('a'+n-1)))
	}
	var keys []string
	require.NoError(t, readEvents(&out, func(ev e2eEvent) { keys = append(keys, ev.Op+" "+ev.ID) }))
	require.Equal(t, []string{"pause b", "pause e", "pause f"}, keys)
}
