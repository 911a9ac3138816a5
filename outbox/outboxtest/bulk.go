package outboxtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// bulkOf returns the store's outbox.BulkIntents, skipping the test when
// it has none: a store may leave it out, and a dispatcher then records
// one ID at a time.
func (b *txBundle) bulkOf(t *testing.T) outbox.BulkIntents {
	t.Helper()
	bulk, ok := b.s.(outbox.BulkIntents)
	if !ok {
		t.Skipf("%T does not implement outbox.BulkIntents", b.s)
	}
	return bulk
}

// intents returns the pending records and create intents of tasks, each
// at version 1.
func intents(tasks ...string) ([]outbox.Record, []outbox.Intent) {
	var rs []outbox.Record
	var ins []outbox.Intent
	for _, task := range tasks {
		r, in := intent(task, 1)
		rs, ins = append(rs, r), append(ins, in)
	}
	return rs, ins
}

// statusesIn gives the latest status and version of each of ids as tx
// sees them through LatestManyTx, "-" for an ID without a record.
func statusesIn(t *testing.T, b *txBundle, bulk outbox.BulkIntents, tx outbox.Tx, ids ...string) []string {
	t.Helper()
	got, err := bulk.LatestManyTx(b.ctx, tx, outbox.TableDispatch, ids)
	require.NoError(t, err)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = "-"
		if r, ok := got[id]; ok {
			out[i] = fmt.Sprintf("%s v%d", r.Status, r.Version)
		}
	}
	require.Len(t, got, len(ids)-countOf(out, "-"), "no entry for an ID without a record")
	return out
}

func countOf(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

// bulkTests hold a store's outbox.BulkIntents to what AppendIntent and
// LatestTx, one ID at a time, would do.
var bulkTests = []struct {
	name string
	run  func(t *testing.T, b *txBundle)
}{
	{"BulkAppendsAsOneByOne", func(t *testing.T, b *txBundle) {
		bulk := b.bulkOf(t)
		done := dispatch("tx", "done", "1", outbox.StatusCreated)
		done.Version = 1
		require.NoError(t, outbox.AppendAndWait(b.ctx, b.s, done))
		b.clock.Advance(time.Second)
		rs, ins := intents("b", "a", "done", "c")
		ids := []string{rs[0].ID, rs[1].ID, rs[2].ID, rs[3].ID}
		b.inTx(t, true, func(tx outbox.Tx) {
			require.Equal(t, []string{"-", "-", "created v1", "-"}, statusesIn(t, b, bulk, tx, ids...))
			refused, err := bulk.AppendIntents(b.ctx, tx, rs, ins)
			require.NoError(t, err)
			require.Len(t, refused, 1, "the ID that holds version 1 already")
			require.Equal(t, []any{outbox.TableDispatch, done.ID, int64(1), outbox.StatusCreated, int64(1)},
				[]any{refused[0].Table, refused[0].ID, refused[0].Version, refused[0].Current.Status, refused[0].Current.Version})
			require.ErrorIs(t, refused[0], outbox.ErrVersionConflict)
			require.Equal(t, []string{"pending v1", "pending v1", "created v1", "pending v1"}, statusesIn(t, b, bulk, tx, ids...), "the transaction sees its own")
			_, ok, err := b.s.Latest(b.ctx, outbox.TableDispatch, ids[0])
			require.NoError(t, err)
			require.False(t, ok, "nothing outside it does")
		})
		for _, id := range []string{ids[0], ids[1], ids[3]} {
			got := b.latest(t, outbox.TableDispatch, id)
			require.Equal(t, []any{outbox.StatusPending, int64(1), T0.Add(time.Second), b.s.ProcessorUUID()}, []any{got.Status, got.Version, got.UpdatedAt, got.ProcessorUUID}, id)
		}
		require.Equal(t, outbox.StatusCreated, b.latest(t, outbox.TableDispatch, done.ID).Status, "the refused record left nothing")
		require.False(t, b.has(t, done.ID), "nor an intent")
		var claimed []string
		for _, in := range b.claim(t, []string{queue}, 10) {
			require.Equal(t, T0.Add(time.Second), in.CreatedAt, in.ID)
			require.Equal(t, request, in.Request, in.ID)
			claimed = append(claimed, in.ID)
		}
		require.Equal(t, []string{ids[1], ids[0], ids[3]}, claimed, "one intent per record kept, oldest first, then by ID")
	}},
	{"BulkNextVersionsReplaceIntents", func(t *testing.T, b *txBundle) {
		bulk := b.bulkOf(t)
		rs, ins := intents("x", "y")
		b.appendAll(t, true, bulk, rs, ins)
		first := b.claim(t, []string{queue}, 10)
		require.Len(t, first, 2)
		for _, in := range first {
			require.NoError(t, b.s.DropIntent(b.ctx, in))
		}
		b.clock.Advance(time.Second)
		for i := range rs {
			prev := b.latest(t, outbox.TableDispatch, rs[i].ID)
			rs[i].Follow(&prev, b.clock.Now())
			ins[i].Version = rs[i].Version
		}
		b.appendAll(t, true, bulk, rs, ins)
		for _, r := range rs {
			got := b.latest(t, outbox.TableDispatch, r.ID)
			require.Equal(t, []any{int64(2), T0, T0.Add(time.Second)}, []any{got.Version, got.CreatedAt, got.UpdatedAt})
		}
		again := b.claim(t, []string{queue}, 10)
		require.Len(t, again, 2)
		require.Equal(t, []int64{2, 2}, []int64{again[0].Version, again[1].Version})
	}},
	{"BulkRolledBackKeepsNothing", func(t *testing.T, b *txBundle) {
		bulk := b.bulkOf(t)
		rs, ins := intents("r1", "r2")
		b.appendAll(t, false, bulk, rs, ins)
		for _, r := range rs {
			_, ok, err := b.s.Latest(b.ctx, outbox.TableDispatch, r.ID)
			require.NoError(t, err)
			require.False(t, ok, r.ID)
			require.False(t, b.has(t, r.ID), r.ID)
		}
		require.Empty(t, b.claim(t, []string{queue}, 10))
	}},
	{"BulkBadBatchWritesNothing", func(t *testing.T, b *txBundle) {
		bulk := b.bulkOf(t)
		b.inTx(t, true, func(tx outbox.Tx) {
			for _, c := range []struct {
				name, want string
				edit       func(rs []outbox.Record, ins []outbox.Intent) ([]outbox.Record, []outbox.Intent)
			}{
				{"an ID twice", `outbox: record dispatch:tx:ok:1: ID "dispatch:tx:ok:1" comes twice, at 0 and 2: a batch appends one record per ID`,
					func(rs []outbox.Record, ins []outbox.Intent) ([]outbox.Record, []outbox.Intent) {
						return append(rs, rs[0]), append(ins, ins[0])
					}},
				{"unpaired", `outbox: record: Intent "1 intents" must pair with the 2 records, one each`,
					func(rs []outbox.Record, ins []outbox.Intent) ([]outbox.Record, []outbox.Intent) { return rs, ins[:1] }},
				{"a bad record", `outbox: record dispatch:tx:bad:1: Status "created" must be pending: an intent's record is the pending one`,
					func(rs []outbox.Record, ins []outbox.Intent) ([]outbox.Record, []outbox.Intent) {
						rs[1].Status = outbox.StatusCreated
						return rs, ins
					}},
				{"two tables", `outbox: record timer:retry:tx:bad:1:1767268800: Table "timers" differs from the first record's (dispatch_outbox): a batch appends to one table`,
					func(rs []outbox.Record, ins []outbox.Intent) ([]outbox.Record, []outbox.Intent) {
						rs[1].Table, rs[1].ID = outbox.TableTimers, "timer:retry:tx:bad:1:1767268800"
						return rs, ins
					}},
			} {
				rs, ins := intents("ok", "bad")
				rs, ins = c.edit(rs, ins)
				refused, err := bulk.AppendIntents(b.ctx, tx, rs, ins)
				require.ErrorIs(t, err, outbox.ErrInvalidRecord, c.name)
				require.EqualError(t, err, c.want, c.name)
				require.Nil(t, refused, c.name)
			}
			refused, err := bulk.AppendIntents(b.ctx, tx, nil, nil)
			require.NoError(t, err, "an empty batch")
			require.Nil(t, refused)
			require.Equal(t, []string{"-", "-"}, statusesIn(t, b, bulk, tx, "dispatch:tx:ok:1", "dispatch:tx:bad:1"), "nothing of a refused batch")
		})
		require.False(t, b.has(t, "dispatch:tx:ok:1"))
	}},
}

// appendAll appends rs and ins with bulk in a transaction that commits,
// or rolls back when commit is false, and requires every one kept in it.
func (b *txBundle) appendAll(t *testing.T, commit bool, bulk outbox.BulkIntents, rs []outbox.Record, ins []outbox.Intent) {
	t.Helper()
	b.inTx(t, commit, func(tx outbox.Tx) {
		refused, err := bulk.AppendIntents(b.ctx, tx, rs, ins)
		require.NoError(t, err)
		require.Empty(t, refused)
	})
}
