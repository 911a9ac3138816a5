package pgbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// statements counts what a connection sends to the server: statements
// (each one round trip) and statement preparations (one more round trip
// the first time a connection runs a statement).
type statements struct{ queries, prepares atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.queries.Add(1)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statements) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	s.prepares.Add(1)
	return ctx
}

func (s *statements) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// counted opens a new database of the test cluster through a pool of one
// connection whose statements s counts.
func counted(t *testing.T, s *statements) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.New(t))
	require.NoError(t, err)
	cfg.Tracer = s
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// A dispatch over this store costs the database two round trips: the
// pending record, tried first (outbox.Reserver), and the outcome; a repeat
// of a dispatched ID one, which returns the recorded state. Counted on a
// connection that has prepared its statements (a first dispatch warms
// it), in both durability modes this store has. About 1 s.
func TestRoundTripsPerDispatch(t *testing.T) {
	t.Parallel()
	queue := "projects/p/locations/l/queues/q"
	for _, mode := range []cloudtasks.Durability{cloudtasks.DurabilityOverlapped, cloudtasks.DurabilityStrict} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock, Queues: []emulator.QueueConfig{{Name: queue}}})
			require.NoError(t, err)
			t.Cleanup(func() { emu.Close() })
			var s statements
			box, err := pgbox.New(counted(t, &s), pgbox.Config{Clock: clock})
			require.NoError(t, err)
			require.NoError(t, box.Migrate(t.Context()))
			dispatch := func(key string) cloudtasks.DispatchResult {
				t.Helper()
				d, err := cloudtasks.NewDispatcher(t.Context(), box, &cloudtasks.Config{
					Project: "p", Location: "l", Queue: "q", EmulatorAddr: emu.Addr(), Clock: clock, Durability: mode,
					NoRelay:         true,  // the relay's passes are its own cost, per interval, not per dispatch
					SkipOutboxCheck: true}) // and the check of the tables one per dispatcher
				require.NoError(t, err)
				res, err := d.Dispatch(t.Context(), cloudtasks.DispatchRequest{RunID: "r", TaskKey: key, Identity: naming.Attempt(1),
					Task: cloudtasks.Task{URL: "https://example.com/work"}})
				require.NoError(t, err)
				require.NoError(t, d.Close(t.Context())) // waits for the outcome record
				return res
			}
			dispatch("warm")

			for _, c := range []struct {
				key     string
				outcome cloudtasks.Outcome
				trips   int64
			}{
				{"new", cloudtasks.OutcomeCreated, 2},
				{"new", cloudtasks.OutcomeAlreadyExisted, 1},
				{"other", cloudtasks.OutcomeCreated, 2},
			} {
				s.queries.Store(0)
				s.prepares.Store(0)
				res := dispatch(c.key)
				require.Equal(t, c.outcome, res.Outcome, c.key)
				require.Equal(t, c.trips, s.queries.Load(), fmt.Sprintf("statements for %s (%s)", c.key, c.outcome))
				require.Zero(t, s.prepares.Load(), "preparations for %s", c.key)
			}
		})
	}
}
