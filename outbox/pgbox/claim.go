package pgbox

import (
	"context"
	"fmt"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// claimBatch bounds the records one ClaimPending claims, so its statement
// stays short and a process that claims does not hold more than it can
// resolve before the claims expire.
const claimBatch = 500

var _ outbox.Claimer = (*Outbox)(nil)

// ClaimPending implements outbox.Claimer: in one short statement it picks
// up to 500 records of table t whose latest state is pending, older than
// olderThan and unclaimed (or whose claim has expired), skipping those
// another ClaimPending is claiming at that moment (FOR UPDATE SKIP LOCKED),
// marks them claimed by this processor until claimFor from now, and
// returns them as Pending orders them. Several recovering processes so
// share the stale records instead of each asking Cloud Tasks about all.
// The claim only divides the work: the verdict a recoverer then writes is
// kept only if the ID's version is still the one it read (a conditional
// Append), whoever else wrote meanwhile. A record whose ID has an intent
// waiting (written by a dispatcher's DispatchTx or ScheduleTimerTx) is
// left to the relays, which alone hold its CreateTask request: were
// Recover to find no task and record not_found, a relay creating it a
// moment later would leave the record saying the task does not exist. The
// deliveries table has nothing to recover: it returns none.
func (o *Outbox) ClaimPending(ctx context.Context, t outbox.Table, olderThan, claimFor time.Duration) ([]outbox.Record, error) {
	tb, err := o.table(t)
	if err != nil {
		return nil, err
	}
	if claimFor <= 0 {
		return nil, &ConfigError{Field: "claimFor", Value: claimFor.String(), Rule: "must be positive: a claim that has expired already shares nothing"}
	}
	if !tb.claims {
		return nil, ctx.Err()
	}
	now := o.clock.Now()
	recs, err := o.query(ctx, tb, tb.claim, now.Add(-olderThan), o.processor, now.Add(claimFor), now)
	if err != nil {
		return nil, fmt.Errorf("pgbox: claim pending: %w", err)
	}
	return sortPending(recs), nil
}
