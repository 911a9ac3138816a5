package cloudtasks

import (
	"context"

	"github.com/ctdispatch/ctdispatch/naming"
	"github.com/ctdispatch/ctdispatch/outbox"
)

// Latest returns the current state of an internal ID (a dispatch or a
// timer) as the dispatcher's outbox records it: its newest record. ok is
// false when the outbox has no record of it. It sees the outcome of every
// call of this dispatcher that has answered: an outcome still being
// recorded (the default mode answers first) is waited for. A malformed ID
// is a *RequestError naming the field ID.
func (d *Dispatcher) Latest(ctx context.Context, id string) (rec outbox.Record, ok bool, err error) {
	nid, err := d.settledID(ctx, id)
	if err != nil {
		return outbox.Record{}, false, err
	}
	return d.box.Latest(ctx, outbox.TableOf(nid), nid.String())
}

// settledID parses id and waits until no work of this dispatcher on it
// is still recording.
func (d *Dispatcher) settledID(ctx context.Context, id string) (naming.ID, error) {
	nid, err := parseID("ID", id)
	if err != nil {
		return naming.ID{}, err
	}
	if err := d.flights.settled(ctx, nid.String()); err != nil {
		return naming.ID{}, err
	}
	return nid, nil
}

// History returns every recorded state of an internal ID, oldest first:
// pending, then the outcome, and the states of later calls (a cancel, a
// dispatch again after a failure). Like Latest, it sees the outcome of
// every call of this dispatcher that has answered. Compaction of a
// parquetbox outbox folds history into the latest state.
func (d *Dispatcher) History(ctx context.Context, id string) ([]outbox.Record, error) {
	nid, err := d.settledID(ctx, id)
	if err != nil {
		return nil, err
	}
	return d.box.Lookup(ctx, outbox.Query{Table: outbox.TableOf(nid), ID: nid.String(), History: true})
}
