package pgbox_test

import (
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Reserve keeps an ID's first record only when the ID has no record at
// all, and otherwise answers with the newest one. About 1 s.
func TestReserve(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	box := openIn(t, pgtest.Open(t), clock)
	record := func(key string, version int64, status outbox.Status) outbox.Record {
		id, err := naming.NewDispatch("reserve", key, naming.Attempt(1))
		require.NoError(t, err)
		r := outbox.RecordOf(id)
		r.Queue, r.Status, r.Version = "projects/p/locations/l/queues/q", status, version
		return r
	}
	// held: "two" has version 1, "legacy" a record of version 0, as a
	// store wrote before records carried versions.
	require.NoError(t, outbox.AppendAndWait(t.Context(), box, record("two", 1, outbox.StatusPending)))
	clock.Advance(time.Second)
	require.NoError(t, outbox.AppendAndWait(t.Context(), box, record("two", 2, outbox.StatusCreated)))
	require.NoError(t, outbox.AppendAndWait(t.Context(), box, record("legacy", 0, outbox.StatusCreated)))

	for _, c := range []struct {
		key        string
		kept       bool
		curVersion int64
		curStatus  outbox.Status
	}{
		{"new", true, 0, ""},
		{"new", false, 1, outbox.StatusPending},
		{"two", false, 2, outbox.StatusCreated},
		{"legacy", false, 0, outbox.StatusCreated},
	} {
		cur, kept, err := box.Reserve(t.Context(), record(c.key, 1, outbox.StatusPending))
		require.NoError(t, err, c.key)
		require.Equal(t, c.kept, kept, c.key)
		require.Equal(t, c.curVersion, cur.Version, c.key)
		require.Equal(t, c.curStatus, cur.Status, c.key)
	}

	_, _, err := box.Reserve(t.Context(), record("late", 2, outbox.StatusPending))
	var re *outbox.RecordError
	require.ErrorAs(t, err, &re)
	require.Equal(t, `outbox: record dispatch:reserve:late:1: Version "2" must be 1: Reserve writes an ID's first record`, err.Error())
}

// Of processes that reserve one ID at once, one keeps its record and each
// other gets that record back. About 1 s.
func TestReserveRace(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	boxes := openTwice(t, pgtest.Open(t), clock)
	const ids = 50
	var kept [2]int
	var wg sync.WaitGroup
	for b, box := range boxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				id, err := naming.NewDispatch("race", string(rune('a'+i%26))+string(rune('a'+i/26)), naming.Attempt(1))
				if err != nil {
					t.Error(err)
					return
				}
				r := outbox.RecordOf(id)
				r.Queue, r.Status, r.Version = "projects/p/locations/l/queues/q", outbox.StatusPending, 1
				cur, ok, err := box.Reserve(t.Context(), r)
				switch {
				case err != nil:
					t.Error(err)
				case ok:
					kept[b]++
				case cur.Version != 1 || cur.ProcessorUUID == box.ProcessorUUID():
					t.Errorf("%s: refused, and answered with %+v", id, cur)
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, ids, kept[0]+kept[1])
	hist, err := boxes[0].Lookup(t.Context(), outbox.Query{RunID: "race", History: true})
	require.NoError(t, err)
	require.Len(t, hist, ids)
}
