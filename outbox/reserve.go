package outbox

import "context"

// Reserver is implemented by an Outbox whose conditional append is decided
// by a shared store before Append returns (a database), so that a writer
// can try its record first and read only when it loses. A dispatcher
// records a new ID's pending state with Reserve in place of a Latest read
// followed by an Append: one round trip instead of two, and a repeat of a
// known ID learns its state from the same round trip.
type Reserver interface {
	// Reserve appends r as Append does and returns once r is kept (as
	// durably as Append's done promises) or refused. When r's Version is
	// refused because the store holds a record of the ID with that
	// Version or a higher one, Reserve returns that ID's newest record
	// (by Newer) and kept false instead of a *VersionConflictError. Any
	// other failure is an error, as from Append.
	Reserve(ctx context.Context, r Record) (current Record, kept bool, err error)
}
