package outbox

import "context"

// Reserver is implemented by an Outbox whose conditional append is decided
// by a shared store before Append returns (a database), so that a writer
// can try its record first and read only when it loses. A dispatcher
// records a new ID's pending state with Reserve in place of a Latest read
// followed by an Append: one round trip instead of two, and a repeat of a
// known ID learns its state from the same round trip.
type Reserver interface {
	// Reserve appends r, an ID's first record (Version 1), as Append
	// does, and returns once r is kept (as durably as Append's done
	// promises) or refused. r is refused when the store holds any record
	// of the ID (of Version 0 too); Reserve then returns that ID's newest
	// record (by Newer) and kept false instead of a *VersionConflictError.
	// Any other failure is an error, as from Append; a Version other than
	// 1 is a *RecordError.
	Reserve(ctx context.Context, r Record) (current Record, kept bool, err error)
}
