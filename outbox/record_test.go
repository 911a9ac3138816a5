package outbox_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestNewerPrefersVersionOverClock(t *testing.T) {
	t.Parallel()
	rec := func(v int64, at time.Duration, st outbox.Status, proc string) *outbox.Record {
		return &outbox.Record{Version: v, UpdatedAt: t0.Add(at), Status: st, ProcessorUUID: proc}
	}
	for _, c := range []struct {
		name string
		a, b *outbox.Record
		want bool
	}{
		{"higher version, earlier clock", rec(2, -50*time.Millisecond, outbox.StatusCancelled, "a"), rec(1, 0, outbox.StatusCreated, "b"), true},
		{"lower version, later clock", rec(1, time.Second, outbox.StatusCreated, "a"), rec(2, 0, outbox.StatusCancelled, "b"), false},
		{"one without a version orders by clock", rec(0, time.Second, outbox.StatusCreated, "a"), rec(5, 0, outbox.StatusCancelled, "b"), true},
		{"same version orders by clock", rec(3, time.Microsecond, outbox.StatusPending, "a"), rec(3, 0, outbox.StatusCreated, "b"), true},
		{"same version and time: terminal beats pending", rec(3, 0, outbox.StatusPending, "z"), rec(3, 0, outbox.StatusCreated, "a"), false},
		{"same version, time and status: larger processor", rec(3, 0, outbox.StatusCreated, "b"), rec(3, 0, outbox.StatusCreated, "a"), true},
	} {
		require.Equal(t, c.want, outbox.Newer(c.a, c.b), c.name)
		if c.want {
			require.False(t, outbox.Newer(c.b, c.a), c.name+" (swapped)")
		}
	}
}

func TestFollowOrdersPastWhatWasRead(t *testing.T) {
	t.Parallel()
	prev := outbox.Record{Version: 4, CreatedAt: t0.Add(-time.Hour), UpdatedAt: t0}
	for _, c := range []struct {
		name        string
		prev        *outbox.Record
		now         time.Time
		wantVersion int64
		wantCreated time.Time
		wantUpdated time.Time
	}{
		{"first record", nil, t0.Add(1500 * time.Nanosecond), 1, t0.Add(time.Microsecond), t0.Add(time.Microsecond)},
		{"clock ahead", &prev, t0.Add(time.Second), 5, t0.Add(-time.Hour), t0.Add(time.Second)},
		{"clock equal", &prev, t0, 5, t0.Add(-time.Hour), t0.Add(time.Microsecond)},
		{"clock 50ms behind", &prev, t0.Add(-50 * time.Millisecond), 5, t0.Add(-time.Hour), t0.Add(time.Microsecond)},
	} {
		var r outbox.Record
		r.Follow(c.prev, c.now)
		require.Equal(t, c.wantVersion, r.Version, c.name)
		require.Equal(t, c.wantCreated, r.CreatedAt, c.name)
		require.Equal(t, c.wantUpdated, r.UpdatedAt, c.name)
	}
}

func TestNewestOfReportsBlindWrites(t *testing.T) {
	t.Parallel()
	a := outbox.Record{Table: outbox.TableTimers, ID: "x", Version: 2, Status: outbox.StatusCancelled, ProcessorUUID: "a", UpdatedAt: t0}
	b := outbox.Record{Table: outbox.TableTimers, ID: "x", Version: 2, Status: outbox.StatusPending, ProcessorUUID: "b", UpdatedAt: t0.Add(time.Millisecond)}
	old := outbox.Record{Table: outbox.TableTimers, ID: "x", Version: 1, Status: outbox.StatusCreated, ProcessorUUID: "a", UpdatedAt: t0.Add(-time.Second)}

	got, ok, err := outbox.NewestOf([]outbox.Record{old, a, a})
	require.NoError(t, err, "a record read twice is one write")
	require.True(t, ok)
	require.Equal(t, a, got)

	got, ok, err = outbox.NewestOf([]outbox.Record{a, old, b})
	require.True(t, ok)
	require.Equal(t, b, got)
	var cw *outbox.ConcurrentWritesError
	require.ErrorAs(t, err, &cw)
	require.ErrorIs(t, err, outbox.ErrConcurrentWrites)
	require.Equal(t, []outbox.Record{a, b}, cw.Records)
	require.Equal(t, "outbox: timers x: version 2 written blind by 2 processors (cancelled by a, pending by b); no order between them", err.Error())

	same := b
	same.ProcessorUUID = "c"
	same.Status = outbox.StatusCancelled
	_, _, err = outbox.NewestOf([]outbox.Record{a, same})
	require.NoError(t, err, "two writers that agree on the status are not a conflict")

	// Blind writes that agree the task was made are no conflict: the
	// newest record that says so is the answer, whatever the order.
	created := outbox.Record{Table: outbox.TableTimers, ID: "x", Version: 2, Status: outbox.StatusCreated, ProcessorUUID: "a", UpdatedAt: t0.Add(time.Millisecond)}
	existed := outbox.Record{Table: outbox.TableTimers, ID: "x", Version: 2, Status: outbox.StatusAlreadyExisted, ProcessorUUID: "b", UpdatedAt: t0}
	pending := outbox.Record{Table: outbox.TableTimers, ID: "x", Version: 2, Status: outbox.StatusPending, ProcessorUUID: "c", UpdatedAt: t0.Add(time.Second)}
	for _, recs := range [][]outbox.Record{{created, existed}, {existed, created}, {pending, existed, created}, {old, pending, created}} {
		got, ok, err = outbox.NewestOf(recs)
		require.NoError(t, err, "%v", recs)
		require.True(t, ok)
		if slices.Contains(recs, created) {
			require.Equal(t, created, got)
		} else {
			require.Equal(t, existed, got)
		}
	}
	got, _, err = outbox.NewestOf([]outbox.Record{pending, existed})
	require.NoError(t, err)
	require.Equal(t, existed, got, "a pending beside an outcome of the same version yields to it")
	cancel := a
	cancel.ProcessorUUID = "d"
	_, _, err = outbox.NewestOf([]outbox.Record{created, existed, cancel})
	require.ErrorIs(t, err, outbox.ErrConcurrentWrites, "a cancel beside a create stays a conflict")

	_, ok, err = outbox.NewestOf(nil)
	require.NoError(t, err)
	require.False(t, ok)
}

// Arrange keeps, per ID, the record NewestOf answers with, so Lookup
// agrees with Latest on blind writes; with History it keeps every state.
func TestArrangeKeepsWhatNewestOfAnswers(t *testing.T) {
	t.Parallel()
	old := outbox.Record{Table: outbox.TableTimers, ID: "x", Version: 1, Status: outbox.StatusPending, ProcessorUUID: "a", UpdatedAt: t0}
	created := outbox.Record{Table: outbox.TableTimers, ID: "x", Version: 2, Status: outbox.StatusCreated, ProcessorUUID: "a", UpdatedAt: t0.Add(time.Millisecond)}
	pending := outbox.Record{Table: outbox.TableTimers, ID: "x", Version: 2, Status: outbox.StatusPending, ProcessorUUID: "c", UpdatedAt: t0.Add(time.Second)}
	other := outbox.Record{Table: outbox.TableTimers, ID: "y", Version: 1, Status: outbox.StatusCancelled, ProcessorUUID: "b", UpdatedAt: t0}
	status := func(recs []outbox.Record) []string {
		var out []string
		for _, r := range recs {
			out = append(out, r.ID+" "+string(r.Status)+" "+r.ProcessorUUID)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		in      []outbox.Record
		history bool
		want    []string
	}{
		{"blind pending beside created", []outbox.Record{pending, other, created, old}, false, []string{"x created a", "y cancelled b"}},
		{"a record read twice", []outbox.Record{created, created, old}, false, []string{"x created a"}},
		{"history keeps every state", []outbox.Record{pending, created, old, old}, true, []string{"x pending a", "x created a", "x pending c"}},
		{"empty", nil, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, status(outbox.Arrange(slices.Clone(tc.in), tc.history)))
		})
	}
}
