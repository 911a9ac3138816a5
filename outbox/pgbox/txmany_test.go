package pgbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/cloudtasks/emulator"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// countingTx counts the statements run in a caller's transaction, and
// calls before (when set) with each statement's number, from 1, before
// running it.
type countingTx struct {
	outbox.Tx
	n      int
	before func(n int)
}

func (c *countingTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	c.count()
	return c.Tx.Exec(ctx, query, args...)
}

func (c *countingTx) Query(ctx context.Context, query string, args ...any) (outbox.Rows, error) {
	c.count()
	return c.Tx.Query(ctx, query, args...)
}

func (c *countingTx) count() {
	c.n++
	if c.before != nil {
		c.before(c.n)
	}
}

// intentsOnly is an outbox with the per-ID transactional methods and not
// outbox.BulkIntents.
type intentsOnly struct {
	outbox.Outbox
	outbox.Intents
}

// inCountedTx runs fn in a transaction of db whose statements tx counts,
// and commits it, or rolls it back when commit is false.
func inCountedTx(t *testing.T, db *sql.DB, commit bool, tx *countingTx, fn func(tx outbox.Tx)) {
	t.Helper()
	inTx(t, db, commit, func(sqlTx outbox.Tx) {
		tx.Tx = sqlTx
		fn(tx)
	})
}

// manyResult is what a step of TestDispatchManyTxSameOnMemoryAndPostgres
// expects of DispatchManyTx: results, or the error's text.
type manyResult struct {
	res []cloudtasks.DispatchResult
	err string
}

// manyStore is a dispatcher on one store, with a transaction of that
// store's and the histories it keeps.
type manyStore struct {
	d *cloudtasks.Dispatcher
	// inTx runs fn in a committed transaction and returns how many
	// statements fn ran in it (-1 where statements are not counted).
	inTx    func(fn func(tx outbox.Tx)) int
	history func(id string) []string
	calls   func() int64
}

func historyOf(t *testing.T, box outbox.Outbox, id string) []string {
	t.Helper()
	hist, err := box.Lookup(t.Context(), outbox.Query{ID: id, History: true})
	require.NoError(t, err)
	out := make([]string, len(hist))
	for i, r := range hist {
		out[i] = fmt.Sprintf("v%d %s", r.Version, r.Status)
	}
	return out
}

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// result is DispatchManyTx's answer for key's dispatch in txQueue.
func result(key string, outcome cloudtasks.Outcome) cloudtasks.DispatchResult {
	id, err := naming.Parse("dispatch:tx:" + key + ":1")
	if err != nil {
		panic(err)
	}
	return cloudtasks.DispatchResult{ID: id.String(), CloudTaskID: id.CloudTaskID(), TaskName: id.TaskName(txQueue),
		Outcome: outcome, FirstRecorded: t0, Skipped: outcome == cloudtasks.OutcomeAlreadyExisted}
}

// The same batches over a Memory and over PostgreSQL get the same
// answers, exactly, and leave the same histories; on PostgreSQL each
// batch runs two statements in the caller's transaction (one when no
// request needs writing), whatever its size.
func TestDispatchManyTxSameOnMemoryAndPostgres(t *testing.T) {
	t.Parallel()
	queued, skipped := cloudtasks.OutcomeQueued, cloudtasks.OutcomeAlreadyExisted
	steps := []struct {
		reqs       []cloudtasks.DispatchRequest
		want       manyResult
		statements int
	}{
		{[]cloudtasks.DispatchRequest{txRequest("a", "1"), txRequest("done", "body"), txRequest("b", "2")},
			manyResult{res: []cloudtasks.DispatchResult{result("a", queued), result("done", skipped), result("b", queued)}}, 2},
		{[]cloudtasks.DispatchRequest{txRequest("c", "3"), txRequest("done", "other")},
			manyResult{err: `cloudtasks: dispatch:tx:done:1: payload sha256 d9298a10d1b0… differs from the recorded 230d8358dc8e…; use a new attempt for a new payload`}, 1},
		{[]cloudtasks.DispatchRequest{txRequest("a", "1"), txRequest("c", "3"), txRequest("cancelled", "body")},
			manyResult{err: `cloudtasks: dispatch:tx:cancelled:1: its task was deleted by a cancel at 2026-01-01T12:00:00Z and Cloud Tasks holds the name until about 2026-01-02T12:00:00Z; no task exists: use a new attempt, or try again after then`}, 1},
		{[]cloudtasks.DispatchRequest{txRequest("c", "3"), txRequest("d", "4"), txRequest("c", "3")},
			manyResult{err: `cloudtasks: reqs[2] "dispatch:tx:c:1" names the same internal ID as reqs[0]; a batch dispatches each ID once (dispatch a repeat in a call of its own)`}, 0},
		{[]cloudtasks.DispatchRequest{txRequest("a", "1"), txRequest("c", "3")},
			manyResult{res: []cloudtasks.DispatchResult{result("a", queued), result("c", queued)}}, 2},
		{[]cloudtasks.DispatchRequest{txRequest("done", "body")},
			manyResult{res: []cloudtasks.DispatchResult{result("done", skipped)}}, 1},
	}
	histories := map[string][]string{
		"a": {"v1 pending", "v2 pending", "v3 created"}, "b": {"v1 pending", "v2 created"}, "c": {"v1 pending", "v2 created"},
		"d": {}, "done": {"v1 pending", "v2 created"}, "cancelled": {"v1 pending", "v2 created", "v3 cancelled"},
	}
	cfg := cloudtasks.Config{NoRelay: true, Durability: cloudtasks.DurabilityStrict}
	for _, c := range []struct {
		name string
		open func(t *testing.T) manyStore
	}{
		{"memory", func(t *testing.T) manyStore {
			clock := clockwork.NewFakeClockAt(t0)
			emu, err := emulator.New(emulator.Config{DisableDelivery: true, Clock: clock, Queues: []emulator.QueueConfig{{Name: txQueue}}})
			require.NoError(t, err)
			t.Cleanup(func() { emu.Close() })
			m := outbox.NewMemory(clock)
			c := cfg
			c.Project, c.Location, c.Queue, c.Clock, c.EmulatorAddr = "p", "l", "q", clock, emu.Addr()
			d, err := cloudtasks.NewDispatcher(t.Context(), m, &c)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
			return manyStore{d: d,
				inTx: func(fn func(tx outbox.Tx)) int {
					tx := m.Begin()
					fn(tx)
					require.NoError(t, tx.Commit())
					return -1
				},
				history: func(id string) []string { return historyOf(t, m, id) },
				calls:   func() int64 { return int64(emu.TaskCount()) }}
		}},
		{"postgres", func(t *testing.T) manyStore {
			w := newTxWorld(t, clockwork.NewFakeClockAt(t0))
			d, box := w.dispatcher(t, cfg)
			return manyStore{d: d,
				inTx: func(fn func(tx outbox.Tx)) int {
					var tx countingTx
					inCountedTx(t, w.db, true, &tx, fn)
					return tx.n
				},
				history: func(id string) []string { return historyOf(t, box, id) },
				calls:   func() int64 { return int64(w.emu.TaskCount()) }}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := c.open(t)
			ctx := t.Context()
			_, err := s.d.Dispatch(ctx, txRequest("done", "body"))
			require.NoError(t, err)
			_, err = s.d.Dispatch(ctx, txRequest("cancelled", "body"))
			require.NoError(t, err)
			_, err = s.d.Cancel(ctx, "dispatch:tx:cancelled:1", "")
			require.NoError(t, err)
			for i, step := range steps {
				var got manyResult
				n := s.inTx(func(tx outbox.Tx) {
					res, err := s.d.DispatchManyTx(ctx, tx, step.reqs)
					got.res = res
					if err != nil {
						got.err = err.Error()
					}
				})
				require.Equal(t, step.want, got, "step %d", i)
				if n >= 0 {
					require.Equal(t, step.statements, n, "statements of step %d", i)
				}
			}
			st, err := s.d.Relay(ctx)
			require.NoError(t, err)
			require.Equal(t, cloudtasks.RelayStats{Claimed: 3, Created: 3}, st)
			require.Equal(t, int64(4), s.calls(), "done's task, and a, b and c's")
			for key, want := range histories {
				require.Equal(t, want, s.history("dispatch:tx:"+key+":1"), key)
			}
		})
	}
}

// A batch of 100 dispatches recorded in a rolled-back transaction leaves
// nothing and wakes nobody; the same batch committed wakes a relay in
// another dispatcher (which never polls) once, and it creates each task
// with one CreateTask call. About 2 s.
func TestDispatchManyTxCommittedCreatedOnce(t *testing.T) {
	t.Parallel()
	const n = 100
	w := newTxWorld(t, clockwork.NewRealClock())
	w.opts.NotifyGap = -1 // every transaction that records intents notifies
	relayListener := newHeardListener(w.listener(t))
	w.dispatcher(t, cloudtasks.Config{RelayInterval: time.Hour, Listener: relayListener})
	d, box := w.dispatcher(t, cloudtasks.Config{NoRelay: true, RelayInterval: 5 * time.Millisecond})
	relayListener.await(t, "")
	batch := func(prefix string) []cloudtasks.DispatchRequest {
		reqs := make([]cloudtasks.DispatchRequest, n)
		for i := range reqs {
			reqs[i] = txRequest(fmt.Sprintf("%s%03d", prefix, i), fmt.Sprint(i))
		}
		return reqs
	}

	inTx(t, w.db, false, func(tx outbox.Tx) {
		res, err := d.DispatchManyTx(t.Context(), tx, batch("rolled-back-"))
		require.NoError(t, err)
		require.Len(t, res, n)
	})
	var ids []string
	inTx(t, w.db, true, func(tx outbox.Tx) {
		res, err := d.DispatchManyTx(t.Context(), tx, batch("committed-"))
		require.NoError(t, err)
		for _, r := range res {
			require.Equal(t, cloudtasks.OutcomeQueued, r.Outcome, r.ID)
			ids = append(ids, r.ID)
		}
	})
	relayListener.await(t, outbox.NoticeIntents)
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		rec, err := d.WaitOutcome(ctx, id)
		cancel()
		require.NoError(t, err)
		require.Equal(t, outbox.StatusCreated, rec.Status, id)
	}
	require.Equal(t, n, w.emu.TaskCount())
	require.Equal(t, int64(n), w.calls.Load(), "one CreateTask call per task")
	hist, err := box.Lookup(t.Context(), outbox.Query{RunID: "tx", History: true})
	require.NoError(t, err)
	require.Len(t, hist, 2*n, "nothing of the rolled-back batch")
	for i := 0; i < len(hist); i += 2 {
		require.Equal(t, []any{hist[i].ID, outbox.StatusPending, outbox.StatusCreated}, []any{hist[i+1].ID, hist[i].Status, hist[i+1].Status})
		require.Contains(t, ids, hist[i].ID)
	}
	claimed, free := intentClaims(t, w.db, w.opts)
	require.Equal(t, []int{0, 0}, []int{claimed, free}, "every intent finished")
}

// A batch costs two statements in the caller's transaction whatever its
// size, one when every request is answered from its record; over an
// outbox without outbox.BulkIntents it costs three per ID, as DispatchTx
// does.
func TestDispatchManyTxStatements(t *testing.T) {
	t.Parallel()
	const n = 100
	w := newTxWorld(t, clockwork.NewFakeClockAt(t0))
	d, _ := w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	w.wrap = func(box *pgbox.Outbox) outbox.Outbox { return intentsOnly{box, box} }
	perID, _ := w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	batch := func(prefix string) []cloudtasks.DispatchRequest {
		reqs := make([]cloudtasks.DispatchRequest, n)
		for i := range reqs {
			reqs[i] = txRequest(fmt.Sprintf("%s%03d", prefix, i), fmt.Sprint(i))
		}
		return reqs
	}
	for _, c := range []struct {
		name       string
		d          *cloudtasks.Dispatcher
		reqs       []cloudtasks.DispatchRequest
		statements int
	}{
		{"new IDs", d, batch("new-"), 2},
		{"over their pending records", d, batch("new-"), 2},
		{"one ID at a time", perID, batch("per-id-"), 2 * n}, // LatestTx, and AppendIntent (its record and intent in one statement)
	} {
		var tx countingTx
		inCountedTx(t, w.db, true, &tx, func(tx outbox.Tx) {
			res, err := c.d.DispatchManyTx(t.Context(), tx, c.reqs)
			require.NoError(t, err, c.name)
			require.Len(t, res, n, c.name)
		})
		require.Equal(t, c.statements, tx.n, c.name)
	}
	st, err := d.Relay(t.Context())
	require.NoError(t, err)
	require.Equal(t, cloudtasks.RelayStats{Claimed: 2 * n, Created: 2 * n}, st)
	var tx countingTx
	inCountedTx(t, w.db, true, &tx, func(tx outbox.Tx) {
		res, err := d.DispatchManyTx(t.Context(), tx, batch("new-"))
		require.NoError(t, err)
		for _, r := range res {
			require.True(t, r.Skipped, r.ID)
		}
	})
	require.Equal(t, 1, tx.n, "every ID created: the read alone")
}

// Another process that records an ID of the batch between the batch's
// read and its write takes the version first: the batch's record of it
// is refused, and the ID is answered from the winner that the refusal
// read (one statement more), already_existed for the same payload, a
// conflict for another. The rest of the batch is written either way,
// so after an error the caller rolls back.
func TestDispatchManyTxAnswersAConcurrentWinner(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		body  string
		want  manyResult
		moved bool
	}{
		{"same payload", "2", manyResult{res: []cloudtasks.DispatchResult{result("a", cloudtasks.OutcomeQueued),
			result("b", cloudtasks.OutcomeAlreadyExisted), result("c", cloudtasks.OutcomeQueued)}}, true},
		{"another payload", "other", manyResult{err: `cloudtasks: dispatch:tx:b:1: payload sha256 d4735e3a265e… differs from the recorded d9298a10d1b0…; use a new attempt for a new payload`}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newTxWorld(t, clockwork.NewFakeClockAt(t0))
			cfg := cloudtasks.Config{NoRelay: true, Durability: cloudtasks.DurabilityStrict}
			d, box := w.dispatcher(t, cfg)
			other, _ := w.dispatcher(t, cfg)
			tx := countingTx{before: func(n int) {
				if n == 2 { // the batch's read is done; its write comes next
					_, err := other.Dispatch(t.Context(), txRequest("b", c.body))
					require.NoError(t, err)
				}
			}}
			var got manyResult
			inCountedTx(t, w.db, c.moved, &tx, func(tx outbox.Tx) {
				res, err := d.DispatchManyTx(t.Context(), tx, []cloudtasks.DispatchRequest{txRequest("a", "1"), txRequest("b", "2"), txRequest("c", "3")})
				got.res = res
				if err != nil {
					got.err = err.Error()
				}
			})
			require.Equal(t, c.want, got)
			require.Equal(t, 3, tx.n, "read, write, and the winner's read")
			require.Equal(t, []string{"v1 pending", "v2 created"}, historyOf(t, box, "dispatch:tx:b:1"), "the other process's")
			st, err := d.Relay(t.Context())
			require.NoError(t, err)
			if c.moved {
				require.Equal(t, cloudtasks.RelayStats{Claimed: 2, Created: 2}, st, "a and c")
			} else {
				require.Equal(t, cloudtasks.RelayStats{}, st, "rolled back")
			}
		})
	}
}
