package pgbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// notMigrated is the hint every call on a database without the tables
// ends with.
const notMigrated = `the outbox tables do not exist; create them with "ctdispatch migrate --outbox postgres://…" or pgbox.Migrate`

// Check names what Migrate has not made: every table (said once), one
// table, or the columns a later Migrate added; nil once migrated.
func TestCheckNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	ctx := t.Context()
	schema := fmt.Sprintf("s%d", schemas.Add(1))
	box, err := pgbox.New(db, pgbox.Options{Schema: schema})
	require.NoError(t, err)
	for _, c := range []struct {
		name, setup, want string
	}{
		{"nothing made", "", "pgbox: " + notMigrated},
		{"migrated", "MIGRATE", ""},
		{"a table dropped", `DROP TABLE "` + schema + `"."ctdispatch_intents"`,
			`pgbox: "` + schema + `"."ctdispatch_intents" missing: ` + notMigrated},
		{"a column dropped", `MIGRATE; ALTER TABLE "` + schema + `"."ctdispatch_timers" DROP COLUMN trace_id`,
			`pgbox: columns "` + schema + `"."ctdispatch_timers".trace_id missing (the tables were made by an older Migrate); add them with "ctdispatch migrate --outbox postgres://…" or pgbox.Migrate`},
	} {
		for s := range strings.SplitSeq(c.setup, "; ") {
			switch s {
			case "":
			case "MIGRATE":
				require.NoError(t, box.Migrate(ctx))
			default:
				_, err := db.ExecContext(ctx, s)
				require.NoError(t, err)
			}
		}
		err := box.Check(ctx)
		if c.want == "" {
			require.NoError(t, err, c.name)
			continue
		}
		require.EqualError(t, err, c.want, c.name)
		require.ErrorIs(t, err, outbox.ErrNotReady, c.name)
	}
}

// A dispatcher made on a database that was never migrated is refused at
// once with the migrate hint; with Config.SkipOutboxCheck it is made, its
// calls fail until the tables exist, and then work. A database that
// cannot be reached gives no answer: the dispatcher is made, and its
// calls fail closed.
func TestNewDispatcherChecksTheTables(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	w := newTxWorld(t, clock)
	opts := pgbox.Options{Schema: fmt.Sprintf("s%d", schemas.Add(1)), Clock: clock}
	box, err := pgbox.New(w.db, opts)
	require.NoError(t, err)
	cfg := cloudtasks.Config{Project: "p", Location: "l", Queue: "q", EmulatorAddr: w.emu.Addr(), Clock: clock}
	_, err = cloudtasks.NewDispatcher(t.Context(), box, &cfg)
	require.EqualError(t, err, "cloudtasks: the outbox cannot keep records (Config.SkipOutboxCheck starts the dispatcher anyway): pgbox: "+notMigrated)

	cfg.SkipOutboxCheck = true
	d, err := cloudtasks.NewDispatcher(t.Context(), box, &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	_, err = d.Dispatch(t.Context(), txRequest("early", "b"))
	require.ErrorIs(t, err, cloudtasks.ErrOutboxUnavailable)
	require.ErrorContains(t, err, notMigrated)

	require.NoError(t, box.Migrate(t.Context()))
	res, err := d.Dispatch(t.Context(), txRequest("early", "b"))
	require.NoError(t, err)
	require.Equal(t, cloudtasks.OutcomeCreated, res.Outcome)

	closed := w.open(t)
	require.NoError(t, closed.Close())
	unreachable, err := pgbox.New(closed, opts)
	require.NoError(t, err)
	require.Error(t, unreachable.Check(t.Context()))
	cfg.SkipOutboxCheck = false
	d, err = cloudtasks.NewDispatcher(t.Context(), unreachable, &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close(context.Background()) })
	_, err = d.Dispatch(t.Context(), txRequest("unreachable", "b"))
	require.ErrorIs(t, err, cloudtasks.ErrOutboxUnavailable)
}
