package riverbench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// TestLines runs each benchmark's line for a few transactions, so that a
// change to either library that breaks one fails here and not first in
// `make bench-river`: each side records exactly what it was asked to
// (counted in its own table), measures one latency per transaction and,
// where it measures CPU, some CPU; every commit of the start line is
// created or started.
func TestLines(t *testing.T) {
	ctx := context.Background()
	count := func(t *testing.T, w *world, table string) int {
		var n int
		require.NoError(t, w.callers.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		return n
	}
	intents := pgbox.IntentTableName(pgbox.Config{})
	for _, c := range []struct {
		name     string
		run      func(t *testing.T, w *world) (ctd, riv *side)
		n, per   int
		recorded bool // the line leaves its intents and jobs in their tables
		measured bool // the line measures CPU
	}{
		{"per call", func(t *testing.T, w *world) (*side, *side) { return txLine(t, w, 5, 2) }, 5, 1, true, true},
		{"bulk", func(t *testing.T, w *world) (*side, *side) { return bulkLine(t, w, 3, 2) }, 3, bulkSize, true, true},
		{"commit to start", func(t *testing.T, w *world) (*side, *side) { return startLine(t, w, 3, 0) }, 3, 1, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			ctd, riv := c.run(t, w)
			for _, s := range []*side{ctd, riv} {
				require.Len(t, s.lat, c.n, s.name)
				require.Equal(t, c.n*c.per, s.jobs, s.name)
				for _, l := range s.lat {
					require.Greater(t, l, time.Duration(0), s.name)
				}
				if c.measured {
					require.Greater(t, s.client, time.Duration(0), s.name)
				}
			}
			if c.recorded {
				// n measured transactions and one unmeasured first.
				require.Equal(t, (c.n+1)*c.per, count(t, w, intents))
				require.Equal(t, (c.n+1)*c.per, count(t, w, "river_job"))
			} else {
				require.Len(t, w.emu.Tasks(queuePath(queueStart)), c.n+1)
			}
		})
	}
}
