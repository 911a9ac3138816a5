// Package outboxtest is the conformance suite of outbox implementations:
// every store a dispatcher can record into (the file outbox, the in-memory
// one, one of your own) must pass Run, so that code and tests written
// against one behave the same against another.
//
// # Use
//
//	func TestConformance(t *testing.T) {
//		outboxtest.Run(t, func(t *testing.T, clock clockwork.Clock) outbox.Outbox {
//			return outbox.NewMemory(clock)
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
// refused and leave nothing behind; the deliveries table keeps each
// delivery of a task apart, with its own columns, and refuses a record
// whose status or status code does not fit.
//
// Versions: a record keeps the Version it was appended with; records
// written through Record.Follow carry Version 1, 2, … with CreatedAt the
// first record's (also for a record repeating the same status) and
// UpdatedAt past the record followed even when the clock went back; an
// append whose Version the ID already has is refused with a
// *outbox.VersionConflictError (matching outbox.ErrVersionConflict) whose
// Current is the stored winner, leaves nothing behind, and Latest then
// returns the winner; Version 0 is unconditional.
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

// T0 is the instant the suite's clock starts at.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const queue = "projects/p/locations/l/queues/q"

// Run runs the conformance tests, each in its own subtest with a new
// store from newStore, built on the clock it is given.
func Run(t *testing.T, newStore func(t *testing.T, clock clockwork.Clock) outbox.Outbox) {
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
	s     outbox.Outbox
}

// dispatch builds a dispatch record of the suite's queue.
func dispatch(run, task, attempt string, st outbox.Status) outbox.Record {
	id, err := naming.Parse("dispatch:" + run + ":" + task + ":" + attempt)
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
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
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
	{"TraceIDsRoundTripInEveryTable", func(t *testing.T, b *bundle) {
		const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		d := dispatch("run1", "traced", "1", outbox.StatusCreated)
		d.TraceID, d.SpanID = traceID, spanID
		id, err := naming.NewRetryTimer("run1", "traced", naming.Attempt(1), T0.Add(time.Hour))
		require.NoError(t, err)
		tm := outbox.RecordOf(id)
		tm.Queue, tm.Status, tm.TraceID, tm.SpanID = queue, outbox.StatusCreated, traceID, spanID
		did, err := naming.Parse(d.ID)
		require.NoError(t, err)
		dl := outbox.DeliveryRecordOf(did, "s1")
		dl.Queue, dl.Status, dl.TraceID, dl.SpanID = "q", outbox.StatusStarted, traceID, spanID
		untraced := dispatch("run1", "untraced", "1", outbox.StatusCreated)
		for _, r := range []outbox.Record{d, tm, dl, untraced} {
			require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
		}
		require.NoError(t, b.s.Flush(b.ctx))
		for _, r := range []outbox.Record{d, tm, dl, untraced} {
			got := b.latest(t, r.Table, r.ID)
			require.Equal(t, r.TraceID, got.TraceID, "%s %s", r.Table, r.ID)
			require.Equal(t, r.SpanID, got.SpanID, "%s %s", r.Table, r.ID)
		}
		// A summary, what a status view shows, keeps the trace ID too.
		sums, err := b.s.Lookup(b.ctx, outbox.Query{RunID: "run1", Summary: true})
		require.NoError(t, err)
		traces := map[string]string{}
		for _, r := range sums {
			if r.Table != outbox.TableDeliveries {
				traces[r.ID] = r.TraceID
			}
		}
		require.Equal(t, map[string]string{d.ID: traceID, tm.ID: traceID, untraced.ID: ""}, traces)
	}},
	{"MalformedTraceIDsRefused", func(t *testing.T, b *bundle) {
		for _, tc := range []struct{ traceID, spanID, want string }{
			{"4BF92F3577B34DA6A3CE929D0E0E4736", "00f067aa0ba902b7", `outbox: record dispatch:run1:a:1: TraceID "4BF92F3577B34DA6A3CE929D0E0E4736" is not a trace context ID; allowed: 32 lowercase hex digits, not all zero, with TraceID and SpanID both set or both empty`},
			{"4bf92f3577b34da6a3ce929d0e0e4736", "", `outbox: record dispatch:run1:a:1: SpanID is not a trace context ID; allowed: 16 lowercase hex digits, not all zero, with TraceID and SpanID both set or both empty`},
			{"00000000000000000000000000000000", "00f067aa0ba902b7", `outbox: record dispatch:run1:a:1: TraceID "00000000000000000000000000000000" is not a trace context ID; allowed: 32 lowercase hex digits, not all zero, with TraceID and SpanID both set or both empty`},
		} {
			r := dispatch("run1", "a", "1", outbox.StatusCreated)
			r.TraceID, r.SpanID = tc.traceID, tc.spanID
			require.EqualError(t, outbox.AppendAndWait(b.ctx, b.s, r), tc.want)
		}
		_, ok, err := b.s.Latest(b.ctx, outbox.TableDispatch, "dispatch:run1:a:1")
		require.NoError(t, err)
		require.False(t, ok)
	}},
	{"TimerKeepsDueAtAndKind", func(t *testing.T, b *bundle) {
		due := T0.Add(time.Hour + time.Nanosecond)
		id, err := naming.NewRetryTimer("run1", "extract", naming.Attempt(1), due)
		require.NoError(t, err)
		r := outbox.Record{Table: outbox.TableTimers, ID: id.String(), Queue: queue, RunID: "run1", TaskKey: "extract",
			Attempt: "1", Kind: "retry", Status: outbox.StatusCreated, DueAt: due}
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
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
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
		got := b.latest(t, outbox.TableDispatch, r.ID)
		require.Equal(t, T0.Add(time.Microsecond), got.UpdatedAt)
		require.Equal(t, got.UpdatedAt, got.CreatedAt)
		require.Equal(t, time.UTC, got.UpdatedAt.Location())
	}},
	{"UpdatedAtStrictlyIncreasesPerID", func(t *testing.T, b *bundle) {
		r := dispatch("run1", "a", "1", outbox.StatusPending)
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
		r.Status = outbox.StatusCreated
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r)) // same instant
		r.Status = outbox.StatusFailed
		r.UpdatedAt = T0.Add(-time.Hour) // earlier than the last state
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
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
			require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
			b.clock.Advance(time.Second)
			r.Status = outbox.StatusCreated
			require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
		}
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, dispatch("run2", "a", "1", outbox.StatusCreated)))
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
			require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, dispatch("r", task, "1", outbox.StatusPending)))
		}
		b.clock.Advance(time.Second)
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, dispatch("r", "x", "1", outbox.StatusPending)))
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, dispatch("r", "done", "1", outbox.StatusPending)))
		b.clock.Advance(time.Second)
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, dispatch("r", "done", "1", outbox.StatusCreated)))
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, dispatch("r", "fresh", "1", outbox.StatusPending)))
		b.clock.Advance(time.Minute)
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, dispatch("r", "new", "1", outbox.StatusPending)))

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
		require.NoError(t, b.s.Append(b.ctx, a, nil))
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, dispatch("r", "sync", "1", outbox.StatusCreated)))
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
			for _, appendFn := range []func(context.Context, outbox.Record) error{
				func(ctx context.Context, r outbox.Record) error { return outbox.AppendAndWait(ctx, b.s, r) },
				func(ctx context.Context, r outbox.Record) error {
					return b.s.Append(ctx, r, func(error) { t.Errorf("%s: done called for a refused record", c.name) })
				},
			} {
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
	{"TimesOutOfRangeRefused", func(t *testing.T, b *bundle) {
		// A time no reader handles is refused at append, naming the field:
		// the epoch reads back as "no time", and a year past 9999 names a
		// partition no listing recognises.
		epoch := time.Unix(0, 0).UTC()
		late := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, c := range []struct {
			field string
			edit  func(*outbox.Record)
		}{
			{"CreatedAt", func(r *outbox.Record) { r.CreatedAt = epoch }},
			{"CreatedAt", func(r *outbox.Record) { r.CreatedAt = late }},
			{"UpdatedAt", func(r *outbox.Record) { r.CreatedAt, r.UpdatedAt = T0, epoch.Add(-time.Hour) }},
			{"UpdatedAt", func(r *outbox.Record) { r.CreatedAt, r.UpdatedAt = T0, late }},
		} {
			r := dispatch("times", "t", "1", outbox.StatusCreated)
			c.edit(&r)
			err := outbox.AppendAndWait(b.ctx, b.s, r)
			var re *outbox.RecordError
			require.ErrorAs(t, err, &re, c.field)
			require.ErrorIs(t, err, outbox.ErrInvalidRecord)
			require.Equal(t, c.field, re.Field)
			require.Contains(t, err.Error(), "1970-01-01T00:00:00.000001Z to 9999-12-31T23:59:59.999999Z")
		}
		r := dispatch("times", "t", "1", outbox.StatusCreated)
		r.CreatedAt, r.UpdatedAt = outbox.MinTime(), outbox.MaxTime()
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r), "the bounds themselves are kept")
		got, ok, err := b.s.Latest(b.ctx, outbox.TableDispatch, r.ID)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, outbox.MinTime(), got.CreatedAt)
		require.Equal(t, outbox.MaxTime(), got.UpdatedAt)
	}},
	{"CancelledContextWritesNothing", func(t *testing.T, b *bundle) {
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		for i := range 200 {
			r := dispatch("cancelled", fmt.Sprintf("t%d", i), "1", outbox.StatusCreated)
			require.True(t, errors.Is(b.s.Append(ctx, r, nil), context.Canceled), "try %d", i)
			require.ErrorIs(t, outbox.AppendAndWait(ctx, b.s, r), context.Canceled)
		}
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, dispatch("other", "t", "1", outbox.StatusCreated)))
		got, err := b.s.Lookup(b.ctx, outbox.Query{RunID: "cancelled"})
		require.NoError(t, err)
		require.Empty(t, got)
	}},
	{"FollowSetsVersionAndTimes", func(t *testing.T, b *bundle) {
		r := dispatch("follow", "t", "1", outbox.StatusPending)
		r.Follow(nil, b.clock.Now())
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
		first := b.latest(t, outbox.TableDispatch, r.ID)
		require.Equal(t, int64(1), first.Version)
		require.Equal(t, T0, first.CreatedAt)
		require.Equal(t, T0, first.UpdatedAt)

		b.clock.Advance(time.Second)
		r.Status = outbox.StatusCreated
		r.Follow(&first, b.clock.Now())
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
		second := b.latest(t, outbox.TableDispatch, r.ID)
		require.Equal(t, int64(2), second.Version)
		require.Equal(t, T0, second.CreatedAt)
		require.Equal(t, T0.Add(time.Second), second.UpdatedAt)

		// A repeated status from a writer whose clock is an hour behind:
		// still after what it read, still the first CreatedAt.
		r.Follow(&second, T0.Add(-time.Hour))
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
		third := b.latest(t, outbox.TableDispatch, r.ID)
		require.Equal(t, int64(3), third.Version)
		require.Equal(t, outbox.StatusCreated, third.Status)
		require.Equal(t, T0, third.CreatedAt)
		require.Equal(t, T0.Add(time.Second+time.Microsecond), third.UpdatedAt)
	}},
	{"ConflictingVersionRefusedWithCurrent", func(t *testing.T, b *bundle) {
		winner := dispatch("conflict", "t", "1", outbox.StatusCancelled)
		winner.Follow(nil, b.clock.Now())
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, winner))
		stored := b.latest(t, outbox.TableDispatch, winner.ID)

		b.clock.Advance(time.Second)
		for range 2 { // a racing first writer, refused each time it tries
			loser := dispatch("conflict", "t", "1", outbox.StatusPending)
			loser.Follow(nil, b.clock.Now())
			err := outbox.AppendAndWait(b.ctx, b.s, loser)
			require.ErrorIs(t, err, outbox.ErrVersionConflict)
			var vc *outbox.VersionConflictError
			require.ErrorAs(t, err, &vc)
			require.Equal(t, stored, vc.Current)
			require.Equal(t, int64(1), vc.Version)
			require.Equal(t, winner.ID, vc.ID)
		}
		require.Equal(t, stored, b.latest(t, outbox.TableDispatch, winner.ID), "Latest after a conflict is the winner")
		hist, err := b.s.Lookup(b.ctx, outbox.Query{ID: winner.ID, History: true})
		require.NoError(t, err)
		require.Equal(t, []outbox.Record{stored}, hist, "a refused record leaves nothing behind")

		next := dispatch("conflict", "t", "1", outbox.StatusPending)
		next.Follow(&stored, b.clock.Now())
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, next), "the version after the winner's is kept")
		require.Equal(t, int64(2), b.latest(t, outbox.TableDispatch, winner.ID).Version)

		unversioned := dispatch("conflict", "t", "1", outbox.StatusFailed)
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, unversioned), "version 0 is unconditional")
	}},
	{"DeliveriesOfOneTaskStayApart", func(t *testing.T, b *bundle) {
		// Two deliveries of one dispatch (started, then the outcome), one
		// of a timer: each delivery folds to its outcome, never the two
		// deliveries of one task into one.
		id, err := naming.NewDispatch("run1", "extract", naming.Attempt(1))
		require.NoError(t, err)
		timer, err := naming.NewRetryTimer("run1", "extract", naming.Attempt(1), T0.Add(time.Hour))
		require.NoError(t, err)
		deliver := func(id naming.ID, suffix string, retries int32, st outbox.Status, code int32) {
			r := outbox.DeliveryRecordOf(id, suffix)
			r.Queue, r.Status, r.CreatedAt = "q", outbox.StatusStarted, b.clock.Now()
			r.Delivery = outbox.DeliveryFields{RetryCount: retries, ExecutionCount: retries / 2}
			require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
			b.clock.Advance(1500 * time.Microsecond)
			r.Status, r.Delivery.HTTPStatus, r.Delivery.Latency = st, code, 1500*time.Microsecond+999*time.Nanosecond
			require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
		}
		deliver(id, "a1", 0, outbox.StatusRetry, 500)
		deliver(id, "b2", 1, outbox.StatusDone, 200)
		deliver(timer, "c3", 0, outbox.StatusDuplicate, 200)

		got, err := b.s.Lookup(b.ctx, outbox.Query{Table: outbox.TableDeliveries, CloudTaskID: id.CloudTaskID()})
		require.NoError(t, err)
		at := func(d time.Duration) time.Time { return T0.Add(d) }
		want := func(suffix string, st outbox.Status, created, updated time.Duration, f outbox.DeliveryFields) outbox.Record {
			return outbox.Record{Table: outbox.TableDeliveries, ID: outbox.DeliveryID(id, suffix), CloudTaskID: id.CloudTaskID(),
				Queue: "q", RunID: "run1", TaskKey: "extract", Attempt: "1",
				Kind: "dispatch", Status: st, ProcessorUUID: b.s.ProcessorUUID(), CreatedAt: at(created), UpdatedAt: at(updated), Delivery: f}
		}
		require.Equal(t, []outbox.Record{
			want("a1", outbox.StatusRetry, 0, 1500*time.Microsecond, outbox.DeliveryFields{HTTPStatus: 500, Latency: 1500 * time.Microsecond}),
			want("b2", outbox.StatusDone, 1500*time.Microsecond, 3000*time.Microsecond,
				outbox.DeliveryFields{RetryCount: 1, HTTPStatus: 200, Latency: 1500 * time.Microsecond}),
		}, got)
		hist, err := b.s.Lookup(b.ctx, outbox.Query{RunID: "run1", History: true})
		require.NoError(t, err)
		var states []string
		for _, r := range hist {
			states = append(states, fmt.Sprintf("%s %s %s %d", r.Table, r.ID, r.Status, r.Delivery.HTTPStatus))
		}
		require.Equal(t, []string{
			"deliveries dispatch:run1:extract:1#a1 started 0", "deliveries dispatch:run1:extract:1#a1 retry 500",
			"deliveries dispatch:run1:extract:1#b2 started 0", "deliveries dispatch:run1:extract:1#b2 done 200",
			"deliveries " + timer.String() + "#c3 started 0", "deliveries " + timer.String() + "#c3 duplicate 200",
		}, states)
		pending, err := b.s.Pending(b.ctx, outbox.TableDeliveries, 0)
		require.NoError(t, err)
		require.Empty(t, pending, "nothing re-drives a delivery")

		for _, c := range []struct {
			name  string
			edit  func(*outbox.Record)
			field string
			is    error
		}{
			{"a dispatch status", func(r *outbox.Record) { r.Status = outbox.StatusCreated }, "Status", outbox.ErrInvalidRecord},
			{"a started record with a status code", func(r *outbox.Record) { r.Delivery.HTTPStatus = 200 }, "Delivery.HTTPStatus", outbox.ErrInvalidRecord},
			{"an outcome without a status code", func(r *outbox.Record) { r.Status = outbox.StatusDone }, "Delivery.HTTPStatus", outbox.ErrInvalidRecord},
			{"a negative retry count", func(r *outbox.Record) { r.Delivery.RetryCount = -1 }, "Delivery.RetryCount", outbox.ErrInvalidRecord},
			{"no suffix", func(r *outbox.Record) { r.ID = id.String() }, "", outbox.ErrForeignRecord},
			{"another task's hash", func(r *outbox.Record) { r.CloudTaskID = timer.CloudTaskID() }, "", outbox.ErrForeignRecord},
		} {
			r := outbox.DeliveryRecordOf(id, "bad")
			r.Queue, r.Status, r.RunID = queue, outbox.StatusStarted, "refused"
			c.edit(&r)
			err := outbox.AppendAndWait(b.ctx, b.s, r)
			require.ErrorIs(t, err, c.is, c.name)
			var re *outbox.RecordError
			if c.field != "" {
				require.ErrorAs(t, err, &re, c.name)
				require.Equal(t, c.field, re.Field, c.name)
			}
		}
		refused, err := b.s.Lookup(b.ctx, outbox.Query{RunID: "refused"})
		require.NoError(t, err)
		require.Empty(t, refused)
	}},
}
