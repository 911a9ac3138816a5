package pgbox

import (
	"errors"

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

// notReady marks Check's answer that the tables are not made as
// outbox.ErrNotReady.
type notReady struct{ error }

func (e notReady) Is(target error) bool { return target == outbox.ErrNotReady }
func (e notReady) Unwrap() error        { return e.error }
