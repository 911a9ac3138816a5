package cloudtasks_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// intentsOnly is an outbox with the per-ID transactional methods and
// not outbox.BulkIntents: DispatchManyTx then reads and writes one ID at
// a time.
type intentsOnly struct {
	outbox.Outbox
	outbox.Intents
}

// manyWorld is a txWorld whose dispatcher has recorded "done" (created)
// and "cancelled" (its name held by the Cancel), so that a batch meets
// every kind of record.
func manyWorld(t *testing.T, wrap func(*outbox.Memory) outbox.Outbox) (*txWorld, *cloudtasks.Dispatcher) {
	t.Helper()
	w := newTxWorld(t, clockwork.NewFakeClockAt(t0))
	var box outbox.Outbox = w.box
	if wrap != nil {
		box = wrap(w.box)
	}
	c, err := w.emu.NewClient(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	d, err := cloudtasks.NewDispatcher(context.Background(), box, &cloudtasks.Config{Project: "proj", Location: "europe-west1", Queue: "default",
		Clock: w.clock, Client: countingClient{Client: c, n: &w.calls}, NoRelay: true, Durability: cloudtasks.DurabilityStrict})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
	ctx := context.Background()
	_, err = d.Dispatch(ctx, txRequest("done", "body"))
	require.NoError(t, err)
	_, err = d.Dispatch(ctx, txRequest("cancelled", "body"))
	require.NoError(t, err)
	_, err = d.Cancel(ctx, "dispatch:tx:cancelled:1", "")
	require.NoError(t, err)
	w.calls.Store(0)
	return w, d
}

func mustParse(id string) naming.ID {
	nid, err := naming.Parse(id)
	if err != nil {
		panic(err)
	}
	return nid
}

// queued is the result DispatchManyTx and DispatchTx give a request of
// key recorded now, at t0.
func queued(key string) cloudtasks.DispatchResult {
	id := mustParse("dispatch:tx:" + key + ":1")
	return cloudtasks.DispatchResult{ID: id.String(), CloudTaskID: id.CloudTaskID(), TaskName: worldQueue + "/tasks/" + id.CloudTaskID(),
		Outcome: cloudtasks.OutcomeQueued, FirstRecorded: t0}
}

// A batch gets, request by request, the answers DispatchTx gives the
// same requests one after the other, and leaves the same records: new
// IDs and a pending one queued, a created one with the same payload
// already_existed and Skipped. With an outbox that lacks
// outbox.BulkIntents the answers are the same. After commit a relay
// pass creates each queued task once.
func TestDispatchManyTxAnswersAsDispatchTxInTurn(t *testing.T) {
	t.Parallel()
	done := mustParse("dispatch:tx:done:1")
	skipped := cloudtasks.DispatchResult{ID: done.String(), CloudTaskID: done.CloudTaskID(), TaskName: worldQueue + "/tasks/" + done.CloudTaskID(),
		Outcome: cloudtasks.OutcomeAlreadyExisted, FirstRecorded: t0, Skipped: true}
	batches := [][]cloudtasks.DispatchRequest{
		{txRequest("a", "1"), txRequest("done", "body"), txRequest("b", "2")},
		{txRequest("a", "1"), txRequest("c", "3")},
	}
	want := [][]cloudtasks.DispatchResult{
		{queued("a"), skipped, queued("b")},
		{queued("a"), queued("c")}, // a again: over its committed pending record
	}
	histories := map[string][]string{
		"a": {"v1 pending", "v2 pending", "v3 created"}, "b": {"v1 pending", "v2 created"},
		"c": {"v1 pending", "v2 created"}, "done": {"v1 pending", "v2 created"},
	}
	for _, c := range []struct {
		name string
		wrap func(*outbox.Memory) outbox.Outbox
		many bool
	}{
		{"DispatchManyTx", nil, true},
		{"DispatchManyTx one ID at a time", func(m *outbox.Memory) outbox.Outbox { return intentsOnly{m, m} }, true},
		{"DispatchTx in turn", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w, d := manyWorld(t, c.wrap)
			ctx := context.Background()
			for i, batch := range batches {
				w.inTx(t, true, func(tx outbox.Tx) {
					var got []cloudtasks.DispatchResult
					if c.many {
						var err error
						got, err = d.DispatchManyTx(ctx, tx, batch)
						require.NoError(t, err)
					} else {
						for _, req := range batch {
							res, err := d.DispatchTx(ctx, tx, req)
							require.NoError(t, err)
							got = append(got, res)
						}
					}
					require.Equal(t, want[i], got, "batch %d", i)
				})
			}
			require.Zero(t, w.calls.Load(), "nothing is created inside a transaction")
			st, err := d.Relay(ctx)
			require.NoError(t, err)
			require.Equal(t, cloudtasks.RelayStats{Claimed: 3, Created: 3}, st)
			require.Equal(t, int64(3), w.calls.Load())
			for key, want := range histories {
				require.Equal(t, want, txHistory(t, w.box, "dispatch:tx:"+key+":1"), key)
			}
		})
	}
}

// A batch with one request DispatchTx would refuse is refused whole, by
// the first such request in order, before anything is written: checks of
// the requests themselves first (naming the request's index), then the
// answers from the records. The transaction, committed, holds nothing of
// the batch.
func TestDispatchManyTxRefusesTheWholeBatch(t *testing.T) {
	t.Parallel()
	badURL := txRequest("x", "1")
	badURL.Task.URL = "ftp://worker.example/run"
	badRun := txRequest("x", "1")
	badRun.RunID = "a:b"
	elsewhere := txRequest("done", "body")
	elsewhere.Task.Queue = "elsewhere"
	big := txRequest("x", "1")
	big.Task.Body = make([]byte, cloudtasks.MaxTaskSize)
	many := make([]cloudtasks.DispatchRequest, cloudtasks.MaxDispatchManyTx+1)
	for i := range many {
		many[i] = txRequest(fmt.Sprintf("m%d", i), "1")
	}
	for _, c := range []struct {
		name string
		reqs []cloudtasks.DispatchRequest
		is   error
		want string
	}{
		{"a bad URL", []cloudtasks.DispatchRequest{txRequest("ok", "1"), txRequest("done", "other"), badURL},
			cloudtasks.ErrInvalidRequest, `cloudtasks: reqs[2].Task.URL "ftp://worker.example/run" is not an absolute http or https URL`},
		{"a bad run ID", []cloudtasks.DispatchRequest{txRequest("ok", "1"), badRun},
			cloudtasks.ErrInvalidRequest, `cloudtasks: reqs[1].RunID "a:b" contains ':' (the separator); allowed: [A-Za-z0-9._-]`},
		{"too large", []cloudtasks.DispatchRequest{txRequest("ok", "1"), big},
			cloudtasks.ErrInvalidRequest, `cloudtasks: reqs[1].Task.Body "1000000 bytes" makes the task 1000216 bytes as encoded; at most 1000000 allowed`},
		{"an ID twice", []cloudtasks.DispatchRequest{txRequest("ok", "1"), txRequest("two", "1"), txRequest("ok", "1")},
			cloudtasks.ErrInvalidRequest, `cloudtasks: reqs[2] "dispatch:tx:ok:1" names the same internal ID as reqs[0]; a batch dispatches each ID once (dispatch a repeat in a call of its own)`},
		{"too many", many,
			cloudtasks.ErrInvalidRequest, `cloudtasks: reqs "1001 requests" exceed MaxDispatchManyTx (1000): split them over several calls, in the same transaction if need be`},
		{"another payload", []cloudtasks.DispatchRequest{txRequest("ok", "1"), txRequest("done", "other"), txRequest("cancelled", "body")},
			cloudtasks.ErrPayloadConflict, `cloudtasks: dispatch:tx:done:1: payload sha256 d9298a10d1b0… differs from the recorded 230d8358dc8e…; use a new attempt for a new payload`},
		{"a held name", []cloudtasks.DispatchRequest{txRequest("ok", "1"), txRequest("cancelled", "body"), txRequest("done", "other")},
			cloudtasks.ErrNameHeld, `cloudtasks: dispatch:tx:cancelled:1: its task was deleted by a cancel at 2026-01-01T12:00:00Z and Cloud Tasks holds the name until about 2026-01-02T12:00:00Z; no task exists: use a new attempt, or try again after then`},
		{"another queue than the record's", []cloudtasks.DispatchRequest{txRequest("ok", "1"), elsewhere},
			cloudtasks.ErrInvalidRequest, `cloudtasks: reqs[1].Task.Queue "elsewhere" names queue projects/proj/locations/europe-west1/queues/elsewhere, but the outbox recorded dispatch:tx:done:1 in queue projects/proj/locations/europe-west1/queues/default; leave it empty or name that queue (another queue needs another attempt)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w, d := manyWorld(t, nil)
			ctx := context.Background()
			w.inTx(t, true, func(tx outbox.Tx) {
				got, err := d.DispatchManyTx(ctx, tx, c.reqs)
				require.ErrorIs(t, err, c.is)
				require.EqualError(t, err, c.want)
				require.Nil(t, got)
			})
			for _, id := range []string{"dispatch:tx:ok:1", "dispatch:tx:two:1", "dispatch:tx:m0:1"} {
				_, ok, err := d.Latest(ctx, id)
				require.NoError(t, err)
				require.False(t, ok, "%s: nothing of the batch is written", id)
			}
			require.Equal(t, []string{"v1 pending", "v2 created"}, txHistory(t, w.box, "dispatch:tx:done:1"))
			st, err := d.Relay(ctx)
			require.NoError(t, err)
			require.Equal(t, cloudtasks.RelayStats{}, st, "no intent")
		})
	}
}

// An empty batch does nothing, whatever the transaction; a nil
// transaction with requests is refused, and so is a batch on an outbox
// that records nothing inside transactions.
func TestDispatchManyTxEdges(t *testing.T) {
	t.Parallel()
	_, d := manyWorld(t, nil)
	ctx := context.Background()
	got, err := d.DispatchManyTx(ctx, nil, nil)
	require.NoError(t, err)
	require.Nil(t, got)
	_, err = d.DispatchManyTx(ctx, nil, []cloudtasks.DispatchRequest{txRequest("a", "1")})
	require.EqualError(t, err, `cloudtasks: tx "nil" is required: the transaction to record the dispatches in`)

	core, err := cloudtasks.NewDispatcher(ctx, coreOnly{outbox.NewMemory(nil)}, &cloudtasks.Config{
		Project: "p", Location: "l", Queue: "q", EmulatorAddr: "127.0.0.1:1"})
	require.NoError(t, err)
	t.Cleanup(func() { core.Close(ctx) })
	_, err = core.DispatchManyTx(ctx, outbox.NewMemory(nil).Begin(), []cloudtasks.DispatchRequest{txRequest("a", "1")})
	require.ErrorIs(t, err, cloudtasks.ErrInvalidConfig)
	require.EqualError(t, err, `cloudtasks: the outbox passed to NewDispatcher (cloudtasks_test.coreOnly) records nothing inside a transaction; DispatchManyTx needs an outbox that implements outbox.Intents (outbox/pgbox, outbox.Memory)`)
}
