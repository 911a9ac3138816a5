package outbox

import (
	"errors"
	"fmt"
)

// Sentinel errors every implementation uses; match them with errors.Is.
var (
	// ErrInvalidRecord matches every *RecordError: a record with a field
	// no implementation accepts.
	ErrInvalidRecord = errors.New("outbox: invalid record")
	// ErrForeignRecord marks a record this system cannot have written: its
	// cloud_task_id is not the hash of its ID, or its ID is not an internal
	// ID of its table. Append refuses one; reads leave one out (Latest,
	// Lookup and Pending never return it).
	ErrForeignRecord = errors.New("outbox: foreign record")
)

// RecordError names the field of a record that is wrong, its value and
// the rule. It matches ErrInvalidRecord.
type RecordError struct {
	// ID is the record's internal ID, when it has one.
	ID string
	// Field is the Record field, for example "CreatedAt".
	Field string
	// Value is the offending value as text.
	Value string
	// Rule says what is allowed.
	Rule string
}

// Error names the record, the field, the value and the rule.
func (e *RecordError) Error() string {
	who := "record"
	if e.ID != "" {
		who = "record " + e.ID
	}
	if e.Value == "" {
		return fmt.Sprintf("outbox: %s: %s %s", who, e.Field, e.Rule)
	}
	return fmt.Sprintf("outbox: %s: %s %q %s", who, e.Field, e.Value, e.Rule)
}

// Is makes a RecordError match ErrInvalidRecord.
func (e *RecordError) Is(target error) bool { return target == ErrInvalidRecord }

// ErrVersionConflict matches every *VersionConflictError: Append refused a
// record whose Version the store already holds for its ID, or a higher one.
var ErrVersionConflict = errors.New("outbox: version conflict")

// VersionConflictError says that Append refused a record because the store
// already holds a record of the same table and ID with the same or a higher
// Version: another writer changed the ID after this one read it. Current is
// the newest record the store holds, so the writer can answer from it
// without reading again. It matches ErrVersionConflict.
type VersionConflictError struct {
	// Table and ID name the record refused.
	Table Table
	ID    string
	// Version is the refused record's Version.
	Version int64
	// Current is the newest record of the ID the store holds.
	Current Record
}

// Error names the ID, the refused version and the one the store holds.
func (e *VersionConflictError) Error() string {
	return fmt.Sprintf("outbox: version conflict on %s %s: version %d refused, the store holds version %d (%s, written by %s)",
		e.Table, e.ID, e.Version, e.Current.Version, e.Current.Status, e.Current.ProcessorUUID)
}

// Is makes a VersionConflictError match ErrVersionConflict.
func (e *VersionConflictError) Is(target error) bool { return target == ErrVersionConflict }
