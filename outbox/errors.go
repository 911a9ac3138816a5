package outbox

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// ErrConcurrentWrites matches every *ConcurrentWritesError: Latest
	// found two records of one ID with the same highest Version from
	// different processors and different statuses, written blind of each
	// other, so the store cannot say which is the ID's state.
	ErrConcurrentWrites = errors.New("outbox: concurrent writes")
	// ErrKeptUnknown marks an Append (or Reserve) error after which the
	// store cannot say whether the record was kept: the answer to its
	// commit was lost (a database connection lost while the statement
	// committed, a server shut down under it) or the caller stopped
	// waiting for it. Read Latest to learn. An error without it means the
	// record was not kept.
	ErrKeptUnknown = errors.New("outbox: whether the record was kept is unknown")
	// ErrNotReady marks a Checker's answer that the store cannot keep
	// records until something is done to it (a database's tables made),
	// as opposed to a check that could not be made (a database not
	// reached).
	ErrNotReady = errors.New("outbox: not ready to keep records")
)

// ConcurrentWritesError is Latest's answer when the newest Version of an
// ID was written twice, by different processors with different statuses,
// neither having seen the other: no rule orders them without trusting a
// clock. Records holds them, ordered by Newer's fallback rule. It matches
// ErrConcurrentWrites.
type ConcurrentWritesError struct {
	// Records are the records sharing the highest Version.
	Records []Record
}

// Error names the ID, the version and each writer's status.
func (e *ConcurrentWritesError) Error() string {
	if len(e.Records) == 0 {
		return "outbox: concurrent writes"
	}
	var b strings.Builder
	for i, r := range e.Records {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s by %s", r.Status, r.ProcessorUUID)
	}
	r := e.Records[0]
	return fmt.Sprintf("outbox: %s %s: version %d written blind by %d processors (%s); no order between them",
		r.Table, r.ID, r.Version, len(e.Records), b.String())
}

// Is makes a ConcurrentWritesError match ErrConcurrentWrites.
func (e *ConcurrentWritesError) Is(target error) bool { return target == ErrConcurrentWrites }

// NewestOf returns the newest of recs by Newer, or a *ConcurrentWritesError
// when two records share the highest Version (> 0) with different
// processors and different statuses, unless they agree that the task was
// made (created or already_existed, with or without a pending beside
// them): then the newest of those is the answer. ok is false when recs is
// empty.
// Stores that read records written without a shared lock call it.
func NewestOf(recs []Record) (newest Record, ok bool, err error) {
	if len(recs) == 0 {
		return Record{}, false, nil
	}
	best := 0
	for i := 1; i < len(recs); i++ {
		if Newer(&recs[i], &recs[best]) {
			best = i
		}
	}
	newest = recs[best]
	if newest.Version == 0 {
		return newest, true, nil
	}
	var blind []Record
	for i := range recs {
		r := &recs[i]
		if r.Version == newest.Version && r.ProcessorUUID != newest.ProcessorUUID && r.Status != newest.Status &&
			!slices.ContainsFunc(blind, func(b Record) bool { return b.ProcessorUUID == r.ProcessorUUID && b.Status == r.Status }) {
			blind = append(blind, *r)
		}
	}
	if len(blind) == 0 {
		return newest, true, nil
	}
	if exists, ok := taskMade(newest, blind); ok {
		return exists, true, nil
	}
	blind = append(blind, newest)
	slices.SortFunc(blind, func(a, b Record) int {
		switch {
		case Newer(&b, &a):
			return -1
		case Newer(&a, &b):
			return 1
		}
		return 0
	})
	return newest, true, &ConcurrentWritesError{Records: blind}
}

// taskMade reports whether blind writes of one version agree that the
// ID's task was made: every status is created, already_existed or
// pending, and at least one is not pending. A created and an
// already_existed both say the task was created; a pending beside them is
// a create still in flight (or whose writer died) for the same
// deterministic task name, which the other's outcome already settled.
// exists is the newest of the records that are not pending. Any other
// mix (a cancel beside a create, say) stays a conflict.
func taskMade(newest Record, blind []Record) (exists Record, ok bool) {
	made := func(s Status) bool { return s == StatusCreated || s == StatusAlreadyExisted }
	found := false
	for _, r := range append([]Record{newest}, blind...) {
		switch {
		case made(r.Status):
			if !found || Newer(&r, &exists) {
				exists, found = r, true
			}
		case r.Status != StatusPending:
			return Record{}, false
		}
	}
	return exists, found
}

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
