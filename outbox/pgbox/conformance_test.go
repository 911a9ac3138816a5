package pgbox_test

import (
	"context"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/outboxtest"
	"github.com/ctdispatch/ctdispatch/outbox/pgbox"
)

// The conformance suites, each test in a schema of its own in one
// database.
func TestConformance(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	newStore := func(t *testing.T, clock clockwork.Clock) outbox.Outbox { return openIn(t, db, clock) }
	outboxtest.Run(t, newStore)
	outboxtest.RunVersions(t, newStore)
	outboxtest.RunIntents(t, func(t *testing.T, clock clockwork.Clock) (outboxtest.TxStore, outboxtest.Begin) {
		return openIn(t, db, clock), func(ctx context.Context) (outbox.Tx, func() error, func() error, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return nil, nil, nil, err
			}
			return pgbox.SQLTx(tx), tx.Commit, tx.Rollback, nil
		}
	})
}
