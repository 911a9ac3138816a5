package pgbox

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// SQLSTATE codes the store tells apart.
const (
	// undefinedTable is a statement on a table that does not exist.
	undefinedTable = "42P01"
)

// sqlState returns the SQLSTATE of a driver error (pgx and lib/pq errors
// have a SQLState method), or "".
func sqlState(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// sentStatementError marks the error of a statement that was sent to the
// server and may have committed though its answer never came: it matches
// outbox.ErrKeptUnknown, unless the server answered with an error that
// aborted the statement or the driver says the statement was never sent.
func sentStatementError(err error) error {
	if err == nil || !answerLost(err) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, outbox.ErrKeptUnknown)
}

// answerLost reports whether a statement that failed with err may have
// committed. The server's own error aborts the statement (nothing of it
// is kept), except one that ends the connection (class 08) or the server
// (57P01 to 57P05), which can come after the commit; a driver error that
// says the statement was never sent (pgx: SafeToRetry; database/sql:
// driver.ErrBadConn, which it retries on another connection) keeps
// nothing either. Any other error (a connection lost while the statement
// committed) leaves it unknown.
func answerLost(err error) bool {
	if st := sqlState(err); st != "" {
		return strings.HasPrefix(st, "08") || strings.HasPrefix(st, "57P")
	}
	var safe interface{ SafeToRetry() bool }
	if errors.As(err, &safe) && safe.SafeToRetry() || errors.Is(err, driver.ErrBadConn) {
		return false
	}
	return true
}

// notReady marks Check's answer that the tables are not made as
// outbox.ErrNotReady.
type notReady struct{ error }

func (e notReady) Is(target error) bool { return target == outbox.ErrNotReady }
func (e notReady) Unwrap() error        { return e.error }
