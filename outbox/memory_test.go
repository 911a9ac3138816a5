package outbox_test

import (
	"context"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Memory's Append calls done before it returns, and never for a record it
// refuses.
func TestMemoryAppendCallsBackAtOnce(t *testing.T) {
	t.Parallel()
	m := outbox.NewMemory(clockwork.NewFakeClock())
	id, err := naming.NewDispatch("r", "t", naming.Attempt(1))
	require.NoError(t, err)
	rec := outbox.RecordOf(id)
	rec.Status = outbox.StatusCreated
	var got []error
	require.NoError(t, m.Append(context.Background(), rec, func(err error) { got = append(got, err) }))
	require.Equal(t, []error{nil}, got)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, m.Append(cancelled, rec, func(err error) { got = append(got, err) }), context.Canceled)
	require.Len(t, got, 1)
}

// txRecord returns the pending record of a dispatch of task at version 1
// and its create intent.
func txRecord(t *testing.T, task string) (outbox.Record, outbox.Intent) {
	t.Helper()
	id, err := naming.NewDispatch("tx", task, naming.Attempt(1))
	require.NoError(t, err)
	r := outbox.RecordOf(id)
	r.Queue, r.Status, r.Version = "projects/p/locations/l/queues/q", outbox.StatusPending, 1
	return r, outbox.Intent{Table: r.Table, ID: r.ID, Version: 1, Queue: r.Queue, Request: []byte("request")}
}

// A Memory's commit is optimistic: a writer that took the transaction's
// version meanwhile wins, and Commit keeps none of the transaction's
// records or intents.
func TestMemoryCommitLosesToAWriterOfItsVersion(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := outbox.NewMemory(clockwork.NewFakeClock())
	r, in := txRecord(t, "raced")
	other, otherIn := txRecord(t, "other")
	tx := m.Begin()
	require.NoError(t, m.AppendIntent(ctx, tx, r, in))
	require.NoError(t, m.AppendIntent(ctx, tx, other, otherIn))
	won := r
	won.Status = outbox.StatusCreated
	require.NoError(t, outbox.AppendAndWait(ctx, m, won))

	err := tx.Commit()
	var vc *outbox.VersionConflictError
	require.ErrorAs(t, err, &vc)
	require.Equal(t, []any{r.ID, int64(1), outbox.StatusCreated}, []any{vc.ID, vc.Version, vc.Current.Status})
	for _, id := range []string{r.ID, other.ID} {
		has, err := m.HasIntent(ctx, id)
		require.NoError(t, err)
		require.False(t, has, id)
	}
	_, ok, err := m.Latest(ctx, outbox.TableDispatch, other.ID)
	require.NoError(t, err)
	require.False(t, ok, "all or nothing")
}

// A Memory records only in an open transaction of its own; a SQL store
// given a Memory transaction is told it runs no statements.
func TestMemoryTakesOnlyItsOwnOpenTransactions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := outbox.NewMemory(clockwork.NewFakeClock())
	r, in := txRecord(t, "t")

	require.EqualError(t, m.AppendIntent(ctx, outbox.NewMemory(nil).Begin(), r, in), "outbox: the transaction is another Memory's")
	require.EqualError(t, m.AppendIntent(ctx, sqlLike{}, r, in), "outbox: a Memory records only in its own transactions (Memory.Begin); given outbox_test.sqlLike")
	done := m.Begin()
	require.NoError(t, done.Commit())
	require.ErrorContains(t, m.AppendIntent(ctx, done, r, in), "committed or rolled back already")
	require.ErrorContains(t, done.Rollback(), "committed or rolled back already")
	_, _, err := m.LatestTx(ctx, done, outbox.TableDispatch, r.ID)
	require.ErrorContains(t, err, "committed or rolled back already")

	_, err = m.Begin().Exec(ctx, "SELECT 1")
	require.ErrorIs(t, err, outbox.ErrNoStatements)
	_, err = m.Begin().Query(ctx, "SELECT 1")
	require.ErrorIs(t, err, outbox.ErrNoStatements)
}

// sqlLike is a transaction of some SQL store.
type sqlLike struct{}

func (sqlLike) Exec(context.Context, string, ...any) (int64, error)        { return 0, nil }
func (sqlLike) Query(context.Context, string, ...any) (outbox.Rows, error) { return nil, nil }
