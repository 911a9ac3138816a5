package pgbox

import "errors"

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
