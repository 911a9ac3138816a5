package pgbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// schemas numbers the schemas tests create, so that tests sharing a
// database (a new database costs a second; a schema, milliseconds) each
// have tables of their own.
var schemas atomic.Int64

// openIn returns a migrated outbox in a new schema of db.
func openIn(t *testing.T, db *sql.DB, clock clockwork.Clock) *pgbox.Outbox {
	t.Helper()
	return openTwice(t, db, clock)[0]
}

// openTwice returns two outboxes (two processors) over the same tables in
// a new schema of db.
func openTwice(t *testing.T, db *sql.DB, clock clockwork.Clock) [2]*pgbox.Outbox {
	t.Helper()
	opts := pgbox.Config{Schema: fmt.Sprintf("s%d", schemas.Add(1)), Clock: clock}
	var boxes [2]*pgbox.Outbox
	for i := range boxes {
		o, err := pgbox.New(db, opts)
		require.NoError(t, err)
		boxes[i] = o
	}
	require.NoError(t, boxes[0].Migrate(context.Background()))
	return boxes
}
