package pgbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// Two processes, each with its own connection pool and processor UUID,
// race to write each of 3 versions of 100 IDs: the store lets exactly one write
// of each (ID, version) through, and each loser gets the winner's record
// as Current. About 6 s on a shared 2-core machine.
func TestConcurrentWritersOneWinnerPerVersion(t *testing.T) {
	t.Parallel()
	const ids, versions = 100, 3
	dsn := pgtest.New(t)
	clock := clockwork.NewRealClock()
	var boxes [2]*pgbox.Outbox
	for i := range boxes {
		db, err := sql.Open("pgx", dsn)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		boxes[i], err = pgbox.New(db, pgbox.Config{Schema: "race", Clock: clock})
		require.NoError(t, err)
		require.NoError(t, boxes[i].Migrate(t.Context()), "Migrate is safe from two processes at once")
	}

	type outcome struct {
		won  bool
		lost *outbox.VersionConflictError
	}
	results := make([][versions][2]outcome, ids)
	var wg sync.WaitGroup
	for w, box := range boxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := int64(1); v <= versions; v++ {
				for i := range ids {
					id, err := naming.NewDispatch("race", fmt.Sprintf("t%d", i), naming.Attempt(1))
					if err != nil {
						t.Error(err)
						return
					}
					r := outbox.RecordOf(id)
					r.Queue, r.Status, r.Version = "projects/p/locations/l/queues/q", outbox.StatusPending, v
					err = outbox.AppendAndWait(context.Background(), box, r)
					var vc *outbox.VersionConflictError
					switch {
					case err == nil:
						results[i][v-1][w].won = true
					case errors.As(err, &vc):
						results[i][v-1][w].lost = vc
					default:
						t.Errorf("%s version %d: %v", r.ID, v, err)
					}
				}
			}
		}()
	}
	wg.Wait()

	wins := [2]int{}
	for i := range results {
		for v := range results[i] {
			got := results[i][v]
			require.True(t, got[0].won != got[1].won, "ID %d version %d: exactly one writer wins, got %+v", i, v+1, got)
			winner, loser := 0, 1
			if got[1].won {
				winner, loser = 1, 0
			}
			wins[winner]++
			cur := got[loser].lost.Current
			require.GreaterOrEqual(t, cur.Version, int64(v+1), "the loser sees the winning version or a later one")
			if cur.Version == int64(v+1) {
				require.Equal(t, boxes[winner].ProcessorUUID(), cur.ProcessorUUID, "Current is the winner's record")
			}
		}
	}
	require.Equal(t, ids*versions, wins[0]+wins[1])
	for i := range ids {
		latest, ok, err := boxes[i%2].Latest(t.Context(), outbox.TableDispatch, fmt.Sprintf("dispatch:race:t%d:1", i))
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, int64(versions), latest.Version)
	}
}
