package pgbox

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// stateError is a driver error with a SQLSTATE, as pgx's and lib/pq's are.
type stateError string

func (e stateError) Error() string    { return "server says " + string(e) }
func (e stateError) SQLState() string { return string(e) }

// unsentError is a driver error that says whether its statement was
// never sent, as pgx's SafeToRetry does.
type unsentError bool

func (e unsentError) Error() string     { return "driver error" }
func (e unsentError) SafeToRetry() bool { return bool(e) }

// A failed statement may have committed when its answer was lost: the
// connection dropped after it was sent, or the server ended the
// connection or itself. An error the server answered otherwise, or one
// the driver says came before sending, kept nothing.
func TestSentStatementErrorTellsALostAnswerFromARefusal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err     error
		unknown bool
	}{
		{io.ErrUnexpectedEOF, true},
		{fmt.Errorf("read: %w", unsentError(false)), true},
		{stateError("08006"), true}, // connection failure
		{stateError("57P01"), true}, // terminating connection due to administrator command
		{stateError("57P02"), true}, // crash shutdown
		{stateError("23505"), false},
		{stateError("42P01"), false},
		{stateError("40P01"), false}, // deadlock: the statement was aborted
		{stateError("57014"), false}, // query cancelled: aborted before its commit
		{unsentError(true), false},
		{fmt.Errorf("pool: %w", driver.ErrBadConn), false},
	} {
		err := sentStatementError(c.err)
		require.Equal(t, c.unknown, errors.Is(err, outbox.ErrKeptUnknown), "%v", c.err)
		require.ErrorIs(t, err, c.err)
	}
	require.NoError(t, sentStatementError(nil))
}
