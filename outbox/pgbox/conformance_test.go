package pgbox_test

import (
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/ctdispatch/ctdispatch/internal/testtools/pgtest"
	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/outboxtest"
)

// The conformance suites, each test in a schema of its own in one
// database.
func TestConformance(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t)
	newStore := func(t *testing.T, clock clockwork.Clock) outbox.Outbox { return openIn(t, db, clock) }
	outboxtest.Run(t, newStore)
	outboxtest.RunVersions(t, newStore)
}
