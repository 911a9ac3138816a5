package pgbox_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Two dispatchers recover at once over one PostgreSQL outbox: through
// their claims each stale record is resolved by one of them, never both.
// About 2 s.
func TestTwoDispatchersRecoverEachRecordOnce(t *testing.T) {
	t.Parallel()
	const stale = 30
	queue := "projects/p/locations/l/queues/q"
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock, Queues: []emulator.QueueConfig{{Name: queue}}})
	require.NoError(t, err)
	t.Cleanup(func() { emu.Close() })
	boxes := openTwice(t, pgtest.Open(t), clock)
	for i := range stale {
		id, err := naming.NewDispatch("recover", fmt.Sprintf("t%02d", i), naming.Attempt(1))
		require.NoError(t, err)
		r := outbox.RecordOf(id)
		r.Queue, r.Status = queue, outbox.StatusPending
		require.NoError(t, outbox.AppendAndWait(t.Context(), boxes[0], r))
	}
	clock.Advance(cloudtasks.DefaultStaleAfter)

	var stats [2]cloudtasks.RecoverStats
	var wg sync.WaitGroup
	for i, box := range boxes {
		d, err := cloudtasks.NewDispatcher(t.Context(), box, &cloudtasks.Config{
			Project: "p", Location: "l", Queue: "q", EmulatorAddr: emu.Addr(), Clock: clock})
		require.NoError(t, err)
		t.Cleanup(func() { d.Close(t.Context()) })
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := d.Recover(t.Context())
			if err != nil {
				t.Error(err)
			}
			stats[i] = st
		}()
	}
	wg.Wait()
	require.Equal(t, stale, stats[0].Stale+stats[1].Stale, "each stale record went to one recoverer: %+v", stats)
	require.Equal(t, stale, stats[0].NotFound+stats[1].NotFound)
	require.Zero(t, stats[0].Errors+stats[1].Errors)
	left, err := boxes[1].Pending(t.Context(), outbox.TableDispatch, 0)
	require.NoError(t, err)
	require.Empty(t, left)
	hist, err := boxes[1].Lookup(t.Context(), outbox.Query{RunID: "recover", History: true})
	require.NoError(t, err)
	require.Len(t, hist, 2*stale, "one verdict per record, not two")
}
