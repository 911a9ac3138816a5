// Package outboxtest is the conformance suite of outbox implementations:
// every store a dispatcher can record into (the file outbox, the in-memory
// one, one of your own) must pass Run, so that code and tests written
// against one behave the same against another.
//
// # Use
//
//	func TestConformance(t *testing.T) {
//		outboxtest.Run(t, func(t *testing.T, clock clockwork.Clock) outboxtest.Store {
//			return outbox.NewMemory("00000000-0000-4000-8000-000000000001", clock)
//		})
//	}
//
// The suite hands each test a fake clock, set to a fixed instant, that the
// store must take its time from: Pending's age and default timestamps
// depend on it.
//
// # What it checks
//
// Times are stored at microsecond precision in UTC; a zero UpdatedAt is
// the clock's now and a zero CreatedAt is UpdatedAt; UpdatedAt strictly
// increases per ID (a write at the same instant is nudged by 1µs); the
// latest state is the last written; Lookup returns states sorted by
// table, ID and time; Pending returns the IDs whose latest state is
// pending and old enough, oldest first, then by ID; invalid and foreign
// records (outbox.ErrForeignRecord) and calls on a cancelled context are
// refused and leave nothing behind.
package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Store is what the suite checks: what a dispatcher needs of an outbox.
// *outbox.Outbox and *outbox.Memory implement it.
type Store interface {
	// ProcessorUUID names the process in every record it writes.
	ProcessorUUID() string
	// Append records r and returns once it is kept.
	Append(ctx context.Context, r outbox.Record) error
	// AppendAsync records r without waiting; a later Append is kept after it.
	AppendAsync(ctx context.Context, r outbox.Record) error
	// Latest returns the current state of an ID.
	Latest(ctx context.Context, t outbox.Table, id string) (outbox.Record, bool, error)
	// Lookup returns the records matching q.
	Lookup(ctx context.Context, q outbox.Query) ([]outbox.Record, error)
	// Pending returns the stale pending records of a table.
	Pending(ctx context.Context, t outbox.Table, olderThan time.Duration) ([]outbox.Record, error)
}

// T0 is the instant the suite's clock starts at.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const queue = "projects/p/locations/l/queues/q"

// Run runs the conformance tests, each in its own subtest with a new
// store from newStore, built on the clock it is given.
func Run(t *testing.T, newStore func(t *testing.T, clock clockwork.Clock) Store) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(T0)
			tc.run(t, &bundle{ctx: context.Background(), clock: clock, s: newStore(t, clock)})
		})
	}
}

type bundle struct {
	ctx   context.Context
	clock *clockwork.FakeClock
	s     Store
}

// dispatch builds a dispatch record of the suite's queue.
func dispatch(run, task, attempt string, st outbox.Status) outbox.Record {
	id, err := naming.NewDispatch(run, task, attempt)
	if err != nil {
		panic(err)
	}
	return outbox.Record{Table: outbox.TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(), Queue: queue,
		RunID: run, TaskKey: task, Attempt: attempt, Status: st, CreateCalls: 1, PayloadSHA256: "ab12"}
}

func (b *bundle) latest(t *testing.T, tab outbox.Table, id string) outbox.Record {
	t.Helper()
	r, ok, err := b.s.Latest(b.ctx, tab, id)
	require.NoError(t, err)
	require.True(t, ok, "%s not found", id)
	return r
}

var tests = []struct {
	name string
	run  func(t *testing.T, b *bundle)
}{
	{"RoundTripAtMicrosecondUTC", func(t *testing.T, b *bundle) {
		r := dispatch("run1", "extract", "1", outbox.StatusCreated)
		paris := time.FixedZone("Paris", 3600)
		r.CreatedAt = time.Date(2026, 3, 1, 13, 0, 0, 123456789, paris)
		r.UpdatedAt = time.Date(2026, 3, 1, 13, 0, 1, 999999999, paris)
		r.DueAt = T0 // not a column of dispatches
		r.ProcessorUUID = "someone else"
		require.NoError(t, b.s.Append(b.ctx, r))
		want := r
		want.CreatedAt = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
		want.UpdatedAt = time.Date(2026, 3, 1, 12, 0, 1, 999999000, time.UTC)
		want.DueAt = time.Time{}
		want.Kind = "dispatch"
		want.TaskName = queue + "/tasks/" + r.CloudTaskID
		want.ProcessorUUID = b.s.ProcessorUUID()
		require.Equal(t, want, b.latest(t, outbox.TableDispatch, r.ID))
		_, ok, err := b.s.Latest(b.ctx, outbox.TableDispatch, "dispatch:run1:extract:2")
		require.NoError(t, err)
		require.False(t, ok)
		_, ok, err = b.s.Latest(b.ctx, outbox.TableTimers, r.ID)
		require.NoError(t, err)
		require.False(t, ok, "tables are separate")
	}},
	{"TimerKeepsDueAtAndKind", func(t *testing.T, b *bundle) {
		due := T0.Add(time.Hour + time.Nanosecond)
		id, err := naming.NewRetryTimer("run1", "extract", "1", due)
		require.NoError(t, err)
		r := outbox.Record{Table: outbox.TableTimers, ID: id.String(), Queue: queue, RunID: "run1", TaskKey: "extract",
			Attempt: "1", Kind: "retry", Status: outbox.StatusCreated, DueAt: due}
		require.NoError(t, b.s.Append(b.ctx, r))
		got := b.latest(t, outbox.TableTimers, r.ID)
		require.Equal(t, id.CloudTaskID(), got.CloudTaskID, "an empty cloud_task_id is filled in")
		require.Equal(t, "retry", got.Kind)
		require.Equal(t, T0.Add(time.Hour), got.DueAt)
		require.Equal(t, T0, got.CreatedAt)
		require.Equal(t, T0, got.UpdatedAt)
	}},
	{"DefaultTimesComeFromTheClock", func(t *testing.T, b *bundle) {
		b.clock.Advance(1500 * time.Nanosecond)
		r := dispatch("run1", "a", "1", outbox.StatusPending)
		require.NoError(t, b.s.Append(b.ctx, r))
		got := b.latest(t, outbox.TableDispatch, r.ID)
		require.Equal(t, T0.Add(time.Microsecond), got.UpdatedAt)
		require.Equal(t, got.UpdatedAt, got.CreatedAt)
		require.Equal(t, time.UTC, got.UpdatedAt.Location())
	}},
	{"UpdatedAtStrictlyIncreasesPerID", func(t *testing.T, b *bundle) {
		r := dispatch("run1", "a", "1", outbox.StatusPending)
		require.NoError(t, b.s.Append(b.ctx, r))
		r.Status = outbox.StatusCreated
		require.NoError(t, b.s.Append(b.ctx, r)) // same instant
		r.Status = outbox.StatusFailed
		r.UpdatedAt = T0.Add(-time.Hour) // earlier than the last state
		require.NoError(t, b.s.Append(b.ctx, r))
		hist, err := b.s.Lookup(b.ctx, outbox.Query{ID: r.ID, History: true})
		require.NoError(t, err)
		var got []string
		for _, h := range hist {
			got = append(got, fmt.Sprintf("%s@%s", h.Status, h.UpdatedAt.Sub(T0)))
		}
		require.Equal(t, []string{"pending@0s", "created@1µs", "failed@2µs"}, got)
		require.Equal(t, outbox.StatusFailed, b.latest(t, outbox.TableDispatch, r.ID).Status)
	}},
	{"LookupSortsAndFolds", func(t *testing.T, b *bundle) {
		for _, task := range []string{"b", "a", "c"} {
			r := dispatch("run1", task, "1", outbox.StatusPending)
			require.NoError(t, b.s.Append(b.ctx, r))
			b.clock.Advance(time.Second)
			r.Status = outbox.StatusCreated
			require.NoError(t, b.s.Append(b.ctx, r))
		}
		require.NoError(t, b.s.Append(b.ctx, dispatch("run2", "a", "1", outbox.StatusCreated)))
		got, err := b.s.Lookup(b.ctx, outbox.Query{RunID: "run1"})
		require.NoError(t, err)
		var ids []string
		for _, r := range got {
			ids = append(ids, string(r.Status)+" "+r.ID)
		}
		require.Equal(t, []string{"created dispatch:run1:a:1", "created dispatch:run1:b:1", "created dispatch:run1:c:1"}, ids)
		byTask, err := b.s.Lookup(b.ctx, outbox.Query{CloudTaskID: got[1].CloudTaskID, History: true})
		require.NoError(t, err)
		require.Len(t, byTask, 2)
		require.Equal(t, outbox.StatusPending, byTask[0].Status)
		require.Equal(t, outbox.StatusCreated, byTask[1].Status)
	}},
	{"PendingOldestFirstThenByID", func(t *testing.T, b *bundle) {
		for _, task := range []string{"z", "y"} {
			require.NoError(t, b.s.Append(b.ctx, dispatch("r", task, "1", outbox.StatusPending)))
		}
		b.clock.Advance(time.Second)
		require.NoError(t, b.s.Append(b.ctx, dispatch("r", "x", "1", outbox.StatusPending)))
		require.NoError(t, b.s.Append(b.ctx, dispatch("r", "done", "1", outbox.StatusPending)))
		b.clock.Advance(time.Second)
		require.NoError(t, b.s.Append(b.ctx, dispatch("r", "done", "1", outbox.StatusCreated)))
		require.NoError(t, b.s.Append(b.ctx, dispatch("r", "fresh", "1", outbox.StatusPending)))
		b.clock.Advance(time.Minute)
		require.NoError(t, b.s.Append(b.ctx, dispatch("r", "new", "1", outbox.StatusPending)))

		got, err := b.s.Pending(b.ctx, outbox.TableDispatch, 30*time.Second)
		require.NoError(t, err)
		var ids []string
		for _, r := range got {
			ids = append(ids, r.ID)
		}
		require.Equal(t, []string{"dispatch:r:y:1", "dispatch:r:z:1", "dispatch:r:x:1", "dispatch:r:fresh:1"}, ids)
		got, err = b.s.Pending(b.ctx, outbox.TableTimers, 0)
		require.NoError(t, err)
		require.Empty(t, got)
	}},
	{"AppendAsyncIsKeptBeforeALaterAppend", func(t *testing.T, b *bundle) {
		a := dispatch("r", "async", "1", outbox.StatusPending)
		require.NoError(t, b.s.AppendAsync(b.ctx, a))
		require.NoError(t, b.s.Append(b.ctx, dispatch("r", "sync", "1", outbox.StatusCreated)))
		require.Equal(t, outbox.StatusPending, b.latest(t, outbox.TableDispatch, a.ID).Status)
	}},
	{"RefusesInvalidAndForeignRecords", func(t *testing.T, b *bundle) {
		r := dispatch("r", "t", "1", outbox.StatusCreated)
		bad := []struct {
			name string
			edit func(*outbox.Record)
			is   error
		}{
			{"empty ID", func(r *outbox.Record) { r.ID = "" }, nil},
			{"unknown status", func(r *outbox.Record) { r.Status = "done" }, nil},
			{"unknown table", func(r *outbox.Record) { r.Table = "jobs" }, nil},
			{"made-up cloud_task_id", func(r *outbox.Record) { r.CloudTaskID = "d_made_up" }, outbox.ErrForeignRecord},
			{"not an internal ID", func(r *outbox.Record) { r.ID, r.CloudTaskID = "job-17", "" }, outbox.ErrForeignRecord},
		}
		for _, c := range bad {
			rr := r
			c.edit(&rr)
			for _, appendFn := range []func(context.Context, outbox.Record) error{b.s.Append, b.s.AppendAsync} {
				err := appendFn(b.ctx, rr)
				require.Error(t, err, c.name)
				if c.is != nil {
					require.ErrorIs(t, err, c.is, c.name)
				}
			}
		}
		got, err := b.s.Lookup(b.ctx, outbox.Query{RunID: "r"})
		require.NoError(t, err)
		require.Empty(t, got)
	}},
	{"CancelledContextWritesNothing", func(t *testing.T, b *bundle) {
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		for i := range 200 {
			r := dispatch("cancelled", fmt.Sprintf("t%d", i), "1", outbox.StatusCreated)
			require.True(t, errors.Is(b.s.AppendAsync(ctx, r), context.Canceled), "try %d", i)
			require.ErrorIs(t, b.s.Append(ctx, r), context.Canceled)
		}
		require.NoError(t, b.s.Append(b.ctx, dispatch("other", "t", "1", outbox.StatusCreated)))
		got, err := b.s.Lookup(b.ctx, outbox.Query{RunID: "cancelled"})
		require.NoError(t, err)
		require.Empty(t, got)
	}},
}
