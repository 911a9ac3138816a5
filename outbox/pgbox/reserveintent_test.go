package pgbox_test

import (
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/cloudtasks"
	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// DispatchTx of a new ID is one statement in the caller's transaction
// (ReserveIntent: the record and the intent, refused if the ID has any
// record); an ID that has one costs the refused reserve, the read and,
// when a pending version is due, the append. Each step's answer and
// statement count are exact. About 1 s.
func TestDispatchTxStatements(t *testing.T) {
	t.Parallel()
	w := newTxWorld(t, clockwork.NewRealClock())
	d, box := w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	steps := []struct {
		name       string
		key, body  string
		outcome    cloudtasks.Outcome
		skipped    bool
		err        string
		statements int
		relay      bool // run a relay pass after the step
	}{
		{name: "a new ID", key: "a", body: "a", outcome: cloudtasks.OutcomeQueued, statements: 1},
		{name: "again, over its pending record", key: "a", body: "a", outcome: cloudtasks.OutcomeQueued, statements: 3, relay: true},
		{name: "again, once created", key: "a", body: "a", outcome: cloudtasks.OutcomeAlreadyExisted, skipped: true, statements: 2},
		{name: "another payload", key: "a", body: "b", statements: 2,
			err: "cloudtasks: dispatch:tx:a:1: payload sha256 3e23e8160039… differs from the recorded ca978112ca1b…; use a new attempt for a new payload"},
		{name: "another new ID", key: "b", body: "b", outcome: cloudtasks.OutcomeQueued, statements: 1},
	}
	for _, s := range steps {
		var tx countingTx
		inCountedTx(t, w.db, s.err == "", &tx, func(tx outbox.Tx) {
			res, err := d.DispatchTx(t.Context(), tx, txRequest(s.key, s.body))
			if s.err != "" {
				require.EqualError(t, err, s.err, s.name)
				return
			}
			require.NoError(t, err, s.name)
			require.Equal(t, []any{s.outcome, s.skipped}, []any{res.Outcome, res.Skipped}, s.name)
		})
		require.Equal(t, s.statements, tx.n, s.name)
		if s.relay {
			st, err := d.Relay(t.Context())
			require.NoError(t, err)
			require.Equal(t, 1, st.Created, s.name)
		}
	}
	hist, err := box.Lookup(t.Context(), outbox.Query{ID: "dispatch:tx:a:1", History: true})
	require.NoError(t, err)
	var statuses []outbox.Status
	for _, r := range hist {
		statuses = append(statuses, r.Status)
	}
	require.Equal(t, []outbox.Status{outbox.StatusPending, outbox.StatusPending, outbox.StatusCreated}, statuses)
}

// An ID whose only record has version 0 (imported from files written
// before versions) is not new: DispatchTx reads it and answers from it,
// as it answered before it tried to reserve. About 1 s.
func TestDispatchTxOverAVersionZeroRecord(t *testing.T) {
	t.Parallel()
	w := newTxWorld(t, clockwork.NewRealClock())
	d, box := w.dispatcher(t, cloudtasks.Config{NoRelay: true})
	var first cloudtasks.DispatchResult
	inTx(t, w.db, false, func(tx outbox.Tx) {
		var err error
		first, err = d.DispatchTx(t.Context(), tx, txRequest("old", "old"))
		require.NoError(t, err)
	})
	r := outbox.Record{Table: outbox.TableDispatch, ID: first.ID, CloudTaskID: first.CloudTaskID, Queue: txQueue, TaskName: first.TaskName,
		RunID: "tx", TaskKey: "old", Attempt: "1", Kind: "dispatch", Status: outbox.StatusCreated, CreateCalls: 1}
	r.PayloadSHA256 = naming.PayloadFingerprint([]byte("old"))
	require.NoError(t, outbox.AppendAndWait(t.Context(), box, r))
	var tx countingTx
	inCountedTx(t, w.db, true, &tx, func(tx outbox.Tx) {
		res, err := d.DispatchTx(t.Context(), tx, txRequest("old", "old"))
		require.NoError(t, err)
		require.Equal(t, []any{cloudtasks.OutcomeAlreadyExisted, true}, []any{res.Outcome, res.Skipped})
	})
	require.Equal(t, 2, tx.n, "the refused reserve and the read")
	got, err := box.Lookup(t.Context(), outbox.Query{ID: first.ID, History: true})
	require.NoError(t, err)
	require.Len(t, got, 1, "nothing written over it")
}
