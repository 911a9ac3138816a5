package outbox

import (
	"context"
	"time"
)

// Claimer is implemented by an Outbox that lets several processes share the
// recovery of stale pending records instead of each re-driving all of them.
// A dispatcher's Recover uses ClaimPending in place of Pending when its
// outbox implements Claimer.
type Claimer interface {
	// ClaimPending returns, as Pending does, records of table t whose
	// latest state is pending and older than olderThan, leaving out those
	// another claim holds, and claims what it returns for claimFor: until
	// then no other ClaimPending returns them. A claim needs no release:
	// the record that resolves the ID supersedes it, and a claimer that
	// stops lets it expire. An implementation may return fewer records
	// than qualify (a bounded batch); the rest wait for the next call.
	ClaimPending(ctx context.Context, t Table, olderThan, claimFor time.Duration) ([]Record, error)
}
