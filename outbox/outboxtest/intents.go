package outboxtest

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// TxStore is a store that does what a database does for a dispatcher: it
// records intents inside transactions on its database (outbox.Intents),
// shares the recovery of stale records (outbox.Claimer) and reserves an
// ID's first record (outbox.Reserver). Package outbox/pgbox and
// outbox.Memory are ones.
type TxStore interface {
	outbox.Outbox
	outbox.Reserver
	outbox.Claimer
	outbox.Intents
}

// Begin starts a transaction on a TxStore's database: tx as the store's
// Intents methods take it, and the functions that commit and roll it
// back.
type Begin func(ctx context.Context) (tx outbox.Tx, commit, rollback func() error, err error)

// RunIntents runs the conformance tests of a TxStore, each in its own
// subtest with a new store (and its Begin) from newStore, built on the
// clock it is given, as Run does. They hold every such store to what a
// dispatcher's DispatchTx, CancelTx, relay and Recover rely on:
//
//   - A pending record and its intent appended in a transaction are seen
//     inside it (LatestTx) and nowhere else, kept together if it commits
//     and not at all if it rolls back.
//   - AppendIntent is conditional on the Version as Append is, against
//     what the transaction sees (its own records too); a later intent of
//     an ID replaces the earlier one; bad intents are *RecordErrors naming
//     the field.
//   - ClaimIntents returns committed intents of the queues named, oldest
//     first, each to one claimer until its claim expires; a cancel that
//     replaces a claimed intent waits until DropIntent of the claimed one
//     releases it; DropIntent of the intent itself ends it (HasIntent).
//   - ReserveIntent (when the store has it) keeps an ID's first record
//     and intent, and nothing for an ID with any record.
//   - AppendOutcome (when the store has it) keeps an intent's outcome and
//     drops the intent in one write; over a replaced intent it is refused
//     as overtaken and releases the replacement.
//   - Reserve keeps only an ID's first record and otherwise answers with
//     the newest.
//   - ClaimPending shares the stale pending records among concurrent
//     claimers until the claims expire, leaves out the IDs whose intent
//     waits for a relay, and returns none of the deliveries table.
//   - A store that implements outbox.BulkIntents (the tests named Bulk…
//     are skipped for one that does not) reads and appends a batch as
//     LatestTx and AppendIntent would one ID at a time: each record under
//     its own condition, the refused ones reported with the winner and
//     left out with their intents, all kept only if the transaction
//     commits; a batch that outbox.PrepareIntents refuses writes nothing.
func RunIntents(t *testing.T, newStore func(t *testing.T, clock clockwork.Clock) (TxStore, Begin)) {
	for _, tc := range append(intentTests[:len(intentTests):len(intentTests)], bulkTests...) {
		t.Run(tc.name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(T0)
			s, begin := newStore(t, clock)
			tc.run(t, &txBundle{bundle: bundle{ctx: t.Context(), clock: clock, s: s}, s: s, begin: begin})
		})
	}
}

type txBundle struct {
	bundle
	s     TxStore
	begin Begin
}

// request stands for a CreateTask request: the store keeps it as it is.
var request = []byte("a CreateTask request")

// intent returns the pending record of task's dispatch at version v and
// its create intent.
func intent(task string, v int64) (outbox.Record, outbox.Intent) {
	r := dispatch("tx", task, "1", outbox.StatusPending)
	r.Version = v
	return r, outbox.Intent{Table: r.Table, ID: r.ID, Version: v, Queue: r.Queue, Request: request}
}

// inTx runs fn in a transaction and commits it, or rolls it back when
// commit is false.
func (b *txBundle) inTx(t *testing.T, commit bool, fn func(tx outbox.Tx)) {
	t.Helper()
	tx, commitTx, rollback, err := b.begin(b.ctx)
	require.NoError(t, err)
	fn(tx)
	if commit {
		require.NoError(t, commitTx())
	} else {
		require.NoError(t, rollback())
	}
}

func (b *txBundle) has(t *testing.T, id string) bool {
	t.Helper()
	has, err := b.s.HasIntent(b.ctx, id)
	require.NoError(t, err)
	return has
}

func (b *txBundle) claim(t *testing.T, queues []string, max int) []outbox.Intent {
	t.Helper()
	ins, err := b.s.ClaimIntents(b.ctx, queues, max, time.Minute)
	require.NoError(t, err)
	return ins
}

var intentTests = []struct {
	name string
	run  func(t *testing.T, b *txBundle)
}{
	{"IntentKeptOnlyIfCommitted", func(t *testing.T, b *txBundle) {
		r, in := intent("rolled-back", 1)
		b.inTx(t, false, func(tx outbox.Tx) {
			require.NoError(t, b.s.AppendIntent(b.ctx, tx, r, in))
			got, ok, err := b.s.LatestTx(b.ctx, tx, outbox.TableDispatch, r.ID)
			require.NoError(t, err)
			require.True(t, ok, "the transaction sees its own record")
			require.Equal(t, []any{outbox.StatusPending, int64(1)}, []any{got.Status, got.Version})
			_, ok, err = b.s.Latest(b.ctx, outbox.TableDispatch, r.ID)
			require.NoError(t, err)
			require.False(t, ok, "nothing outside it does")
			require.False(t, b.has(t, r.ID))
		})
		_, ok, err := b.s.Latest(b.ctx, outbox.TableDispatch, r.ID)
		require.NoError(t, err)
		require.False(t, ok, "a rollback keeps no record")
		require.False(t, b.has(t, r.ID), "and no intent")
		require.Empty(t, b.claim(t, []string{queue}, 10))

		r, in = intent("committed", 1)
		b.inTx(t, true, func(tx outbox.Tx) { require.NoError(t, b.s.AppendIntent(b.ctx, tx, r, in)) })
		got := b.latest(t, outbox.TableDispatch, r.ID)
		require.Equal(t, []any{outbox.StatusPending, int64(1), T0, b.s.ProcessorUUID()}, []any{got.Status, got.Version, got.UpdatedAt, got.ProcessorUUID})
		require.True(t, b.has(t, r.ID))
		in.CreatedAt = T0
		require.Equal(t, []outbox.Intent{in}, b.claim(t, []string{queue}, 10))
		require.NoError(t, b.s.DropIntent(b.ctx, in))
		require.False(t, b.has(t, r.ID), "a dropped intent is finished")
		b.clock.Advance(time.Hour)
		require.Empty(t, b.claim(t, []string{queue}, 10))
	}},
	{"AppendIntentIsConditionalOnWhatTheTransactionSees", func(t *testing.T, b *txBundle) {
		done := dispatch("tx", "done", "1", outbox.StatusCreated)
		done.Version = 1
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, done))
		r, in := intent("twice", 1)
		b.inTx(t, true, func(tx outbox.Tx) {
			got, ok, err := b.s.LatestTx(b.ctx, tx, outbox.TableDispatch, done.ID)
			require.NoError(t, err)
			require.True(t, ok, "committed records are seen")
			require.Equal(t, outbox.StatusCreated, got.Status)
			over, overIn := intent("done", 1)
			var vc *outbox.VersionConflictError
			require.ErrorAs(t, b.s.AppendIntent(b.ctx, tx, over, overIn), &vc)
			require.Equal(t, outbox.StatusCreated, vc.Current.Status)

			require.NoError(t, b.s.AppendIntent(b.ctx, tx, r, in))
			require.ErrorAs(t, b.s.AppendIntent(b.ctx, tx, r, in), &vc, "its own record holds version 1")
			require.Equal(t, []any{outbox.StatusPending, int64(1)}, []any{vc.Current.Status, vc.Current.Version})
			first, _, err := b.s.LatestTx(b.ctx, tx, outbox.TableDispatch, r.ID)
			require.NoError(t, err)
			again, againIn := intent("twice", 2)
			again.Follow(&first, T0)
			require.NoError(t, b.s.AppendIntent(b.ctx, tx, again, againIn), "the next version replaces the intent")
			got, _, err = b.s.LatestTx(b.ctx, tx, outbox.TableDispatch, r.ID)
			require.NoError(t, err)
			require.Equal(t, []any{int64(2), T0, T0.Add(time.Microsecond)}, []any{got.Version, got.CreatedAt, got.UpdatedAt})
		})
		hist, err := b.s.Lookup(b.ctx, outbox.Query{ID: r.ID, History: true})
		require.NoError(t, err)
		require.Len(t, hist, 2)
		require.Equal(t, []int64{1, 2}, []int64{hist[0].Version, hist[1].Version})
		claimed := b.claim(t, []string{queue}, 10)
		require.Len(t, claimed, 1, "one intent per ID, the latest")
		require.Equal(t, int64(2), claimed[0].Version)
		require.Equal(t, outbox.StatusCreated, b.latest(t, outbox.TableDispatch, done.ID).Status, "the refused intent left nothing")
	}},
	{"BadIntentsRefusedNamingTheField", func(t *testing.T, b *txBundle) {
		b.inTx(t, true, func(tx outbox.Tx) {
			for _, c := range []struct {
				field string
				edit  func(r *outbox.Record, in *outbox.Intent)
			}{
				{"Status", func(r *outbox.Record, in *outbox.Intent) { r.Status = outbox.StatusCreated }},
				{"Version", func(r *outbox.Record, in *outbox.Intent) { r.Version, in.Version = 0, 0 }},
				{"Intent", func(r *outbox.Record, in *outbox.Intent) { in.Version = 2 }},
				{"Intent", func(r *outbox.Record, in *outbox.Intent) { in.Queue = queue + "-other" }},
				{"Intent.Request", func(r *outbox.Record, in *outbox.Intent) { in.Request = nil }},
			} {
				r, in := intent("bad", 1)
				c.edit(&r, &in)
				var re *outbox.RecordError
				require.ErrorAs(t, b.s.AppendIntent(b.ctx, tx, r, in), &re, c.field)
				require.Equal(t, c.field, re.Field)
			}
			_, in := intent("bad", 1)
			for _, c := range []struct {
				field string
				edit  func(in *outbox.Intent)
			}{
				{"Intent.Delete", func(in *outbox.Intent) { in.Delete = false }},
				{"Intent.Table", func(in *outbox.Intent) { in.Table = outbox.TableDeliveries }},
				{"Intent", func(in *outbox.Intent) { in.Queue = "" }},
				{"Intent.Version", func(in *outbox.Intent) { in.Version = -1 }},
				{"Intent.ID", func(in *outbox.Intent) { in.ID = "job-17" }},
			} {
				cancel := outbox.Intent{Delete: true, Table: in.Table, ID: in.ID, Version: 1, Queue: in.Queue}
				c.edit(&cancel)
				var re *outbox.RecordError
				require.ErrorAs(t, b.s.AppendCancel(b.ctx, tx, cancel), &re, c.field)
				require.Equal(t, c.field, re.Field)
			}
		})
		require.False(t, b.has(t, "dispatch:tx:bad:1"))
		_, ok, err := b.s.Latest(b.ctx, outbox.TableDispatch, "dispatch:tx:bad:1")
		require.NoError(t, err)
		require.False(t, ok)
	}},
	{"AppendOutcomeDropsTheIntentInTheSameWrite", func(t *testing.T, b *txBundle) {
		oa, ok := b.s.(outbox.OutcomeAppender)
		if !ok {
			t.Skipf("%T appends outcomes and drops intents apart", b.s)
		}
		r, in := intent("relayed", 1)
		b.inTx(t, true, func(tx outbox.Tx) { require.NoError(t, b.s.AppendIntent(b.ctx, tx, r, in)) })
		claimed := b.claim(t, []string{queue}, 10)
		require.Len(t, claimed, 1)
		pending := b.latest(t, outbox.TableDispatch, r.ID)
		b.clock.Advance(time.Second)
		out := pending
		out.Follow(&pending, b.clock.Now())
		out.Status = outbox.StatusCreated
		require.NoError(t, oa.AppendOutcome(b.ctx, out, claimed[0]))
		got := b.latest(t, outbox.TableDispatch, r.ID)
		require.Equal(t, []any{outbox.StatusCreated, int64(2), T0.Add(time.Second)}, []any{got.Status, got.Version, got.UpdatedAt})
		require.False(t, b.has(t, r.ID), "the outcome's write dropped the intent")

		// A later transaction replaced the claimed intent: the outcome is
		// refused as overtaken, the replaced intent is gone, and the
		// replacement is released at once.
		r, in = intent("replaced", 1)
		b.inTx(t, true, func(tx outbox.Tx) { require.NoError(t, b.s.AppendIntent(b.ctx, tx, r, in)) })
		claimed = b.claim(t, []string{queue}, 10)
		require.Len(t, claimed, 1)
		pending = b.latest(t, outbox.TableDispatch, r.ID)
		again, againIn := intent("replaced", 2)
		again.Follow(&pending, b.clock.Now())
		b.inTx(t, true, func(tx outbox.Tx) { require.NoError(t, b.s.AppendIntent(b.ctx, tx, again, againIn)) })
		require.Empty(t, b.claim(t, []string{queue}, 10), "the replacement keeps the claim")
		out = pending
		out.Follow(&pending, b.clock.Now())
		out.Status = outbox.StatusCreated
		var vc *outbox.VersionConflictError
		require.ErrorAs(t, oa.AppendOutcome(b.ctx, out, claimed[0]), &vc)
		require.Equal(t, []any{outbox.StatusPending, int64(2)}, []any{vc.Current.Status, vc.Current.Version})
		next := b.claim(t, []string{queue}, 10)
		require.Len(t, next, 1, "released at once")
		require.Equal(t, []any{r.ID, int64(2), false}, []any{next[0].ID, next[0].Version, next[0].Delete})

		// Bad pairs are refused before anything is written.
		var re *outbox.RecordError
		other := out
		other.ID = "dispatch:tx:other:1"
		require.ErrorAs(t, oa.AppendOutcome(b.ctx, other, next[0]), &re)
		require.Equal(t, "Intent", re.Field)
		cancel := next[0]
		cancel.Delete = true
		require.ErrorAs(t, oa.AppendOutcome(b.ctx, out, cancel), &re)
		require.Equal(t, "Intent", re.Field)
		delivery := out
		delivery.Table = outbox.TableDeliveries
		require.ErrorAs(t, oa.AppendOutcome(b.ctx, delivery, next[0]), &re)
		require.Equal(t, "Table", re.Field)
		require.True(t, b.has(t, r.ID), "the refused calls dropped nothing")
		require.Equal(t, outbox.StatusPending, b.latest(t, outbox.TableDispatch, r.ID).Status)
	}},
	{"ReserveIntentKeepsOnlyAnIDsFirst", func(t *testing.T, b *txBundle) {
		ri, ok := b.s.(outbox.IntentReserver)
		if !ok {
			t.Skipf("%T reads before every intent", b.s)
		}
		reserve := func(commit bool, r outbox.Record, in outbox.Intent) bool {
			t.Helper()
			var kept bool
			b.inTx(t, commit, func(tx outbox.Tx) {
				var err error
				kept, err = ri.ReserveIntent(b.ctx, tx, r, in)
				require.NoError(t, err)
			})
			return kept
		}
		r, in := intent("first", 1)
		require.True(t, reserve(false, r, in), "kept in its transaction")
		require.False(t, b.has(t, r.ID), "which rolled back")
		require.True(t, reserve(true, r, in))
		require.True(t, b.has(t, r.ID))
		require.Equal(t, []any{outbox.StatusPending, int64(1)}, []any{b.latest(t, outbox.TableDispatch, r.ID).Status, b.latest(t, outbox.TableDispatch, r.ID).Version})
		require.False(t, reserve(true, r, in), "the ID has a record")
		hist, err := b.s.Lookup(b.ctx, outbox.Query{ID: r.ID, History: true})
		require.NoError(t, err)
		require.Len(t, hist, 1, "the refused reserve wrote nothing")

		old := dispatch("tx", "imported", "1", outbox.StatusCreated) // version 0: from files written before versions
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, old))
		r, in = intent("imported", 1)
		require.False(t, reserve(true, r, in), "a version 0 record is a record")
		require.False(t, b.has(t, r.ID))

		r, in = intent("second", 2)
		b.inTx(t, false, func(tx outbox.Tx) {
			_, err := ri.ReserveIntent(b.ctx, tx, r, in)
			var re *outbox.RecordError
			require.ErrorAs(t, err, &re)
			require.Equal(t, "Version", re.Field)
		})
	}},
	{"CancelReplacesAnIntentAndWaitsForItsClaim", func(t *testing.T, b *txBundle) {
		r, in := intent("raced", 1)
		b.inTx(t, true, func(tx outbox.Tx) { require.NoError(t, b.s.AppendIntent(b.ctx, tx, r, in)) })
		cancel := outbox.Intent{Delete: true, Table: r.Table, ID: r.ID, Version: 1, Queue: queue}
		b.inTx(t, false, func(tx outbox.Tx) { require.NoError(t, b.s.AppendCancel(b.ctx, tx, cancel)) })
		claimed := b.claim(t, []string{queue}, 10)
		require.Len(t, claimed, 1)
		require.False(t, claimed[0].Delete, "the rolled-back cancel replaced nothing")

		b.clock.Advance(time.Second)
		b.inTx(t, true, func(tx outbox.Tx) { require.NoError(t, b.s.AppendCancel(b.ctx, tx, cancel)) })
		require.Empty(t, b.claim(t, []string{queue}, 10), "the cancel waits for the claimed create")
		require.True(t, b.has(t, r.ID))
		require.NoError(t, b.s.DropIntent(b.ctx, claimed[0]))
		require.True(t, b.has(t, r.ID), "dropping the replaced create leaves the cancel")
		next := b.claim(t, []string{queue}, 10)
		cancel.Request, cancel.CreatedAt = []byte{}, T0.Add(time.Second)
		require.Equal(t, []outbox.Intent{cancel}, next, "released at once")
		require.NoError(t, b.s.DropIntent(b.ctx, next[0]))
		require.False(t, b.has(t, r.ID))
	}},
	{"ClaimIntentsOldestFirstUntilTheClaimExpires", func(t *testing.T, b *txBundle) {
		const other = "projects/p/locations/l/queues/other"
		var ids []string
		for _, task := range []string{"c", "a", "b"} {
			r, in := intent(task, 1)
			b.inTx(t, true, func(tx outbox.Tx) { require.NoError(t, b.s.AppendIntent(b.ctx, tx, r, in)) })
			ids = append(ids, r.ID)
			b.clock.Advance(time.Second)
		}
		r, in := intent("elsewhere", 1)
		r.Queue, in.Queue = other, other
		b.inTx(t, true, func(tx outbox.Tx) { require.NoError(t, b.s.AppendIntent(b.ctx, tx, r, in)) })
		idsOf := func(ins []outbox.Intent) []string {
			out := []string{}
			for _, in := range ins {
				out = append(out, in.ID)
			}
			return out
		}
		require.Equal(t, ids[:2], idsOf(b.claim(t, []string{queue}, 2)))
		require.Equal(t, ids[2:], idsOf(b.claim(t, []string{queue}, 2)))
		require.Empty(t, b.claim(t, []string{queue}, 2), "each is claimed once")
		require.Empty(t, b.claim(t, nil, 2), "no queue, no intent")
		require.Equal(t, []string{r.ID}, idsOf(b.claim(t, []string{queue, other}, 10)))
		b.clock.Advance(time.Minute)
		require.Equal(t, append(ids, r.ID), idsOf(b.claim(t, []string{queue, other}, 10)), "claims expire")

		_, err := b.s.ClaimIntents(b.ctx, []string{queue}, 0, time.Minute)
		require.Error(t, err, "max 0")
		_, err = b.s.ClaimIntents(b.ctx, []string{queue}, 1, 0)
		require.Error(t, err, "claimFor 0")
	}},
	{"ReserveKeepsOnlyAnIDsFirstRecord", func(t *testing.T, b *txBundle) {
		record := func(task string, version int64, st outbox.Status) outbox.Record {
			r := dispatch("reserve", task, "1", st)
			r.Version = version
			return r
		}
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, record("two", 1, outbox.StatusPending)))
		b.clock.Advance(time.Second)
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, record("two", 2, outbox.StatusCreated)))
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, record("legacy", 0, outbox.StatusCreated)))
		for _, c := range []struct {
			task       string
			kept       bool
			curVersion int64
			curStatus  outbox.Status
		}{
			{"new", true, 0, ""},
			{"new", false, 1, outbox.StatusPending},
			{"two", false, 2, outbox.StatusCreated},
			{"legacy", false, 0, outbox.StatusCreated},
		} {
			cur, kept, err := b.s.Reserve(b.ctx, record(c.task, 1, outbox.StatusPending))
			require.NoError(t, err, c.task)
			require.Equal(t, []any{c.kept, c.curVersion, c.curStatus}, []any{kept, cur.Version, cur.Status}, c.task)
		}
		_, _, err := b.s.Reserve(b.ctx, record("late", 2, outbox.StatusPending))
		require.EqualError(t, err, `outbox: record dispatch:reserve:late:1: Version "2" must be 1: Reserve writes an ID's first record`)
	}},
	{"ClaimPendingSharesTheWorkAndLeavesIntentsToRelays", func(t *testing.T, b *txBundle) {
		var all []string
		for _, task := range []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"} {
			r := dispatch("claims", task, "1", outbox.StatusPending)
			r.Version = 1
			require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, r))
			all = append(all, r.ID)
		}
		r, in := intent("relayed", 1)
		b.inTx(t, true, func(tx outbox.Tx) { require.NoError(t, b.s.AppendIntent(b.ctx, tx, r, in)) })
		b.clock.Advance(time.Minute)
		fresh := dispatch("claims", "fresh", "1", outbox.StatusPending)
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, fresh))

		var got [2][]outbox.Record
		var wg sync.WaitGroup
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				recs, err := b.s.ClaimPending(b.ctx, outbox.TableDispatch, 30*time.Second, time.Minute)
				if err != nil {
					t.Error(err)
				}
				got[i] = recs
			}()
		}
		wg.Wait()
		var union []string
		for _, r := range append(got[0], got[1]...) {
			union = append(union, r.ID)
		}
		sort.Strings(union)
		require.Equal(t, all, union, "each stale record claimed once; not the fresh one, nor the one a relay holds")
		again, err := b.s.ClaimPending(b.ctx, outbox.TableDispatch, 30*time.Second, time.Minute)
		require.NoError(t, err)
		require.Empty(t, again, "claims hold until they expire")
		pending, err := b.s.Pending(b.ctx, outbox.TableDispatch, 30*time.Second)
		require.NoError(t, err)
		require.Len(t, pending, 11, "Pending lists claimed records and those awaiting a relay")

		done := append(got[0], got[1]...)[0]
		done.Status, done.Version, done.UpdatedAt = outbox.StatusCreated, 2, time.Time{}
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, done))
		in.CreatedAt = T0
		require.NoError(t, b.s.DropIntent(b.ctx, in))
		b.clock.Advance(time.Minute)
		expired, err := b.s.ClaimPending(b.ctx, outbox.TableDispatch, 30*time.Second, time.Minute)
		require.NoError(t, err)
		var ids []string
		for _, r := range expired {
			ids = append(ids, r.ID)
		}
		require.Len(t, ids, 11, "the 9 left, the one whose intent is finished, and the one now stale")
		require.NotContains(t, ids, done.ID, "a finished record is no longer pending")
		require.Contains(t, ids, fresh.ID)
		require.Contains(t, ids, r.ID)

		none, err := b.s.ClaimPending(b.ctx, outbox.TableDeliveries, 0, time.Minute)
		require.NoError(t, err)
		require.Empty(t, none, "nothing re-drives a delivery")
		_, err = b.s.ClaimPending(b.ctx, outbox.TableDispatch, 0, 0)
		require.Error(t, err, "claimFor 0")
	}},
}
