package outbox

import (
	"fmt"
	"strings"

	"github.com/jonboulle/clockwork"

	"github.com/ctdispatch/ctdispatch/naming"
)

// distrust returns why a record cannot be taken as one this system wrote,
// or "" when it can. A record is trusted only when its ID is an internal
// ID of its table's kind, its status is known, it has a time, and its
// cloud_task_id is that ID's hash. Anything else (a row typed in by hand,
// one left by another program) would otherwise let a Dispatch believe a
// task exists that was never created.
func (r *Record) distrust() string {
	if err := r.validate(); err != nil {
		return strings.TrimPrefix(err.Error(), "outbox: ")
	}
	id, err := naming.Parse(r.ID)
	if err != nil {
		return fmt.Sprintf("ID %q is not an internal ID: %v", r.ID, err)
	}
	want := id.CloudTaskID()
	if (r.Table == TableDispatch) != strings.HasPrefix(want, "d_") {
		return fmt.Sprintf("ID %q does not belong in table %s", r.ID, r.Table)
	}
	if r.CloudTaskID != want {
		return fmt.Sprintf("cloud_task_id %q of %s is not the Cloud Tasks ID of that ID (want %q)", r.CloudTaskID, r.ID, want)
	}
	if r.UpdatedAt.IsZero() {
		return fmt.Sprintf("record %s has no updated_at", r.ID)
	}
	return ""
}

// prepare checks a record about to be appended and fills in what Append
// promises: the processor, UpdatedAt (now) and CreatedAt (UpdatedAt) when
// zero, CloudTaskID from the ID when empty, microsecond UTC times. A
// record that would read back as foreign is refused.
func (r *Record) prepare(processor string, clock clockwork.Clock) error {
	if err := r.validate(); err != nil {
		return err
	}
	r.ProcessorUUID = processor
	if r.UpdatedAt.IsZero() {
		r.UpdatedAt = clock.Now()
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = r.UpdatedAt
	}
	if r.CloudTaskID == "" {
		r.CloudTaskID, _ = naming.CloudTaskID(r.ID) // distrust names a bad ID
	}
	r.normalize()
	if reason := r.distrust(); reason != "" {
		return fmt.Errorf("%w: %s", ErrForeignRecord, reason)
	}
	return nil
}

// trusted reports whether distrust finds nothing wrong.
func (r *Record) trusted() bool { return r.distrust() == "" }

// trustedStream passes on the trusted records of src and hands every other
// one to foreign, so merges never fold a foreign row into a real state.
type trustedStream struct {
	src     recordStream
	foreign func(*Record)
}

func (s trustedStream) next() (Record, error) {
	for {
		r, err := s.src.next()
		if err != nil || r.trusted() {
			return r, err
		}
		s.foreign(&r)
	}
}
