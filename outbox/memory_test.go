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
