package cloudtasks_test

import (
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// strictTimerModel is timerModel without the unknown answers a store of
// files may give: a conditional append in one database leaves no blind
// write to settle, so a schedule or cancel is never indeterminate, and a
// Latest is exact: none before anything was recorded, created or
// already_existed exactly while the task exists, cancelled only while it
// does not; never not_found or failed (nothing here recovers). A Latest of
// pending is allowed: it is a schedule's own record while its call is on
// the wire, which no single point of that schedule can stand for. A
// schedule refused before its call (other processes' records took each
// version it read; it made no call) is allowed as timerModel allows it:
// it changed nothing.
var strictTimerModel = porcupine.Model{
	Partition:         timerModel.Partition,
	Init:              timerModel.Init,
	DescribeOperation: timerModel.DescribeOperation,
	Step: func(state, input, output any) (bool, any) {
		s, out := state.(timerState), output.(string)
		if input.(histOp).Op != "latest" {
			if out == "indeterminate" {
				return false, s
			}
			return timerModel.Step(state, input, output)
		}
		switch out {
		case "none":
			return !s.exists && !s.held, s
		case "created", "already_existed":
			return s.exists, s
		case "cancelled":
			return !s.exists, s
		case "pending":
			return true, s
		}
		return false, s
	},
}

// TestHistoriesOverPostgresAreStrictlyLinearizable records histories as
// TestHistoriesAreLinearizable does (3 processes, 120 operations on 3
// timer IDs, per run, 3 seeded runs), each process with its own pool on
// one PostgreSQL outbox (package pgbox), and checks them against
// strictTimerModel. The same run with the planted stale read must fail
// the check. Budget: about 15 s on 2 cores, 40 s under the race detector.
func TestHistoriesOverPostgresAreStrictlyLinearizable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	database := func() string {
		dsn := pgtest.New(t)
		db, err := sql.Open("pgx", dsn)
		require.NoError(t, err)
		defer db.Close()
		require.NoError(t, pgbox.Migrate(t.Context(), db, pgbox.Config{}))
		return dsn
	}
	for seed := range uint64(3) {
		h := runHistory(t, false, seed+1, envPG+"="+database())
		require.Len(t, h, 3*historyOps, "every operation answered, none with an error")
		res, info := porcupine.CheckOperationsVerbose(strictTimerModel, h, 30*time.Second)
		if res != porcupine.Ok {
			path := t.TempDir() + "/history.html"
			_ = porcupine.VisualizePath(strictTimerModel, info, path)
			t.Fatalf("seed %d: history of %d operations is %s under the strict model", seed+1, len(h), res)
		}
		t.Logf("seed %d: %d operations checked, linearizable under the strict model", seed+1, len(h))
	}
	stale := false
	for seed := range uint64(12) {
		if !porcupine.CheckOperations(strictTimerModel, runHistory(t, true, seed+1, envPG+"="+database())) {
			stale = true
			break
		}
	}
	require.True(t, stale, "a Latest that skips others' records must give a history the strict model rejects")
}
