package outbox

import (
	"fmt"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/naming"
)

// Table names one of the tables of the outbox. Each table is a directory
// of Parquet files under the outbox root, named after the table.
type Table string

// The tables of the outbox.
const (
	// TableDispatch holds one row per state of a task attempt; its ID column
	// is dispatch_id.
	TableDispatch Table = "dispatch_outbox"
	// TableTimers holds one row per state of a retry or heartbeat timer; its
	// ID column is timer_id, and it adds kind and due_at.
	TableTimers Table = "timers"
	// TableDeliveries holds two rows per delivery a worker received (started,
	// then its outcome), in the worker's own outbox; its ID column is
	// delivery_id (see DeliveryID), and it adds the delivery's counts,
	// HTTP status and latency.
	TableDeliveries Table = "deliveries"
)

// Tables returns every table, in a stable order.
func Tables() [3]Table { return [3]Table{TableDispatch, TableTimers, TableDeliveries} }

// IDColumn is the name of the table's ID column: dispatch_id, timer_id or
// delivery_id.
func (t Table) IDColumn() string {
	switch t {
	case TableTimers:
		return "timer_id"
	case TableDeliveries:
		return "delivery_id"
	}
	return "dispatch_id"
}

// Validate returns an error unless t is one of the tables.
func (t Table) Validate() error {
	switch t {
	case TableDispatch, TableTimers, TableDeliveries:
		return nil
	}
	return &RecordError{Field: "Table", Value: string(t),
		Rule: fmt.Sprintf("is unknown; allowed: %q, %q, %q", TableDispatch, TableTimers, TableDeliveries)}
}

// Status is the state of a dispatch or timer as recorded in the outbox.
type Status string

// The statuses a record may carry.
const (
	// StatusPending is written before the create call; a record that stays
	// pending past a stale timeout is re-driven by recovery.
	StatusPending Status = "pending"
	// StatusCreated means this attempt created the task.
	StatusCreated Status = "created"
	// StatusAlreadyExisted means the task existed already (a deduplicated
	// call, still a success).
	StatusAlreadyExisted Status = "already_existed"
	// StatusFailed means the create call failed permanently.
	StatusFailed Status = "failed"
	// StatusCancelled means the task or timer was deleted on request.
	StatusCancelled Status = "cancelled"
	// StatusNotFound means recovery found no task under the name: it was
	// never created, or it ran and is gone. Like failed, the ID may be
	// dispatched again; unlike failed, it is not a failure.
	StatusNotFound Status = "not_found"
)

// Terminal reports whether the status is final: every status except
// pending. Retention only ever drops records in a terminal status. A
// delivery's started is terminal in that sense: nothing re-drives a
// delivery, and one whose worker died stays started for good.
func (s Status) Terminal() bool {
	switch s {
	case StatusCreated, StatusAlreadyExisted, StatusFailed, StatusCancelled, StatusNotFound:
		return true
	}
	return s.delivery()
}

// Record is one state of one dispatch, timer or delivery: a row of the
// outbox.
//
// A dispatch or timer has a history of records (pending, then an outcome);
// the newest one (see Newer: by Version, then UpdatedAt) is its current
// state. A writer derives Version, UpdatedAt and CreatedAt from the record
// it read with Follow, and Append refuses a record whose Version the store
// already holds (ErrVersionConflict). A delivery has two
// (started, then its outcome) under its own ID, so that the deliveries of
// one task never fold into one; see DeliveryRecordOf.
type Record struct {
	// Table is the table the record belongs to.
	Table Table
	// ID is the internal ID (dispatch_id or timer_id), for example
	// dispatch:run1:extract:1, or in the deliveries table a delivery ID
	// (DeliveryID: the internal ID, '#' and a suffix).
	ID string
	// CloudTaskID is the Cloud Tasks task ID derived from ID (d_… or t_…).
	CloudTaskID string
	// TaskName is the full task resource name. It is not stored: it is
	// derived from Queue and CloudTaskID when a record is read, and filled
	// in the same way on Append when left empty. Empty in the deliveries
	// table.
	TaskName string
	// Queue is the full queue resource name
	// (projects/…/locations/…/queues/…); in the deliveries table, the
	// queue's ID as the worker receives it (X-CloudTasks-QueueName).
	Queue string
	// RunID is the orchestration run.
	RunID string
	// TaskKey names the task within the run.
	TaskKey string
	// Attempt is the attempt slot of the ID (empty for heartbeats).
	Attempt string
	// Kind is "dispatch", "retry" or "heartbeat". Dispatch records always
	// read back as "dispatch"; only the timers table stores the column.
	Kind string
	// Status is the state this record describes.
	Status Status
	// ErrorCode is the gRPC code name of the last error, or "". The
	// deliveries table does not store it.
	ErrorCode string
	// CreateCalls counts the CreateTask calls made for this attempt so far.
	CreateCalls int32
	// PayloadSHA256 is the payload fingerprint (hex SHA-256).
	PayloadSHA256 string
	// ProcessorUUID names the process that wrote the record (audit only).
	ProcessorUUID string
	// CreatedAt is when the dispatch or timer was first recorded.
	CreatedAt time.Time
	// UpdatedAt is when this record was written. Within one processor it
	// strictly increases per ID (Append nudges it by a microsecond when
	// needed), so the latest record is well defined.
	UpdatedAt time.Time
	// DueAt is when a timer fires; zero for dispatches and deliveries.
	DueAt time.Time
	// TraceID and SpanID are the OpenTelemetry trace and span this record
	// was written under, in lowercase hex (32 and 16 characters), or both
	// empty when there was none: the producer span of a dispatch or timer
	// (whose context the task's traceparent header carries), the consumer
	// span of a delivery. Records written before the columns existed read
	// them as empty.
	TraceID, SpanID string
	// Version is the ID's version this record sets: 1 for an ID's first
	// record, and one more than the Version of the record the writer read
	// (Latest) before writing. Zero in records written before versions
	// existed, which order by UpdatedAt alone.
	Version int64

	// Delivery holds the columns only the deliveries table stores; it is
	// zero in the others.
	Delivery DeliveryFields

	// id is the parsed ID of a record made by RecordOf, so that Prepare
	// need not parse and hash again what naming just built. Prepare
	// clears it: a stored or read record never carries it.
	id naming.ID
}

// RecordOf returns the record of id in its table, with the fields the ID
// determines (Table, ID, CloudTaskID, RunID, TaskKey, Attempt, Kind, DueAt)
// filled in. A record made this way is not parsed again by Prepare.
func RecordOf(id naming.ID) Record {
	r := Record{
		Table: TableDispatch, ID: id.String(), CloudTaskID: id.CloudTaskID(),
		RunID: id.RunID(), TaskKey: id.TaskKey(), Attempt: id.Attempt(), Kind: id.Kind().String(), id: id,
	}
	if id.IsTimer() {
		r.Table, r.DueAt = TableTimers, id.Time()
	}
	return r
}

// TableOf returns the table that holds the records of id.
func TableOf(id naming.ID) Table {
	if id.IsTimer() {
		return TableTimers
	}
	return TableDispatch
}

// The range of times a record may carry. Every reader of the files handles
// it: a zero time is stored as "no time", so the Unix epoch itself cannot be
// told from none, and partitions are named YYYY-MM-DD, so a year past 9999
// would name a directory no listing recognises.
var (
	minTime = time.Unix(0, 1000).UTC()
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

// MinTime returns the earliest time a record may carry: one microsecond
// after the Unix epoch.
func MinTime() time.Time { return minTime }

// MaxTime returns the latest time a record may carry: the last microsecond
// of the year 9999.
func MaxTime() time.Time { return maxTime }

// Normalize fills the derived fields and truncates times to the
// microsecond precision the files store, so a record reads back equal.
// Implementations call it on every record they return.
func (r *Record) Normalize() {
	r.CreatedAt = truncMicro(r.CreatedAt)
	r.UpdatedAt = truncMicro(r.UpdatedAt)
	r.DueAt = truncMicro(r.DueAt)
	switch r.Table {
	case TableDispatch:
		r.Kind = "dispatch"
		r.DueAt = time.Time{}
	case TableDeliveries:
		r.DueAt, r.ErrorCode, r.CreateCalls, r.PayloadSHA256 = time.Time{}, "", 0, ""
		r.Delivery.Latency = r.Delivery.Latency.Truncate(time.Microsecond)
	}
	if r.Table != TableDeliveries {
		r.Delivery = DeliveryFields{}
	}
	switch {
	case r.Table == TableDeliveries:
		r.TaskName = "" // its Queue is the queue's ID only, as the worker sees it
	case !isTaskName(r.TaskName, r.Queue, r.CloudTaskID):
		r.TaskName = naming.TaskName(r.Queue, r.CloudTaskID)
	}
}

// isTaskName reports whether name is already queue/tasks/cloudTaskID (or
// both are empty and so is name), so that Normalize builds it only when it
// must.
func isTaskName(name, queue, cloudTaskID string) bool {
	if queue == "" || cloudTaskID == "" {
		return name == ""
	}
	const mid = "/tasks/"
	return len(name) == len(queue)+len(mid)+len(cloudTaskID) &&
		name[:len(queue)] == queue && name[len(queue):len(queue)+len(mid)] == mid && name[len(queue)+len(mid):] == cloudTaskID
}

func truncMicro(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.UnixMicro(t.UnixMicro()).UTC()
}

// Validate checks the fields every record needs: a known table and
// status, an ID, a Version not below 0, and times within MinTime and
// MaxTime. Errors are *RecordError values naming the field, the value and
// the rule.
func (r *Record) Validate() error {
	if err := r.Table.Validate(); err != nil {
		return err
	}
	if r.ID == "" {
		return &RecordError{Field: "ID", Rule: "is empty"}
	}
	if r.Version < 0 {
		return &RecordError{ID: r.ID, Field: "Version", Value: fmt.Sprint(r.Version),
			Rule: "is negative; allowed: 0 (unversioned) or a version from 1"}
	}
	if r.Table == TableDeliveries {
		if err := r.validateDelivery(); err != nil {
			return err
		}
	} else {
		switch r.Status {
		case StatusPending, StatusCreated, StatusAlreadyExisted, StatusFailed, StatusCancelled, StatusNotFound:
		default:
			return &RecordError{ID: r.ID, Field: "Status", Value: string(r.Status),
				Rule: "is unknown; allowed: pending, created, already_existed, failed, cancelled, not_found"}
		}
	}
	if err := r.validateTrace(); err != nil {
		return err
	}
	for _, f := range [...]struct {
		name string
		t    time.Time
	}{{"CreatedAt", r.CreatedAt}, {"UpdatedAt", r.UpdatedAt}, {"DueAt", r.DueAt}} {
		if f.t.IsZero() {
			continue
		}
		if t := truncMicro(f.t); t.Before(minTime) || t.After(maxTime) {
			return &RecordError{ID: r.ID, Field: f.name, Value: f.t.UTC().Format(time.RFC3339Nano),
				Rule: "is outside the range every reader handles: " + minTime.Format(time.RFC3339Nano) + " to " + maxTime.Format(time.RFC3339Nano)}
		}
	}
	return nil
}

// Distrust returns why a record cannot be taken as one this system
// wrote, or "" when it can. A record is trusted only when it is valid, its
// ID is an internal ID of its table's kind, it has an UpdatedAt, and its
// cloud_task_id is that ID's hash. Anything else (a row typed in by hand,
// one left by another program) would otherwise let a Dispatch believe a
// task exists that was never created, so readers leave such rows out.
func (r *Record) Distrust() string {
	if err := r.Validate(); err != nil {
		return strings.TrimPrefix(err.Error(), "outbox: ")
	}
	return r.distrustID()
}

// distrustID is Distrust for a record already validated.
func (r *Record) distrustID() string {
	internal := r.ID
	if r.Table == TableDeliveries {
		var ok bool
		if internal, _, ok = SplitDeliveryID(r.ID); !ok {
			return fmt.Sprintf("delivery ID %q is not an internal ID, '#' and a suffix", r.ID)
		}
	}
	id := r.id
	if id.IsZero() || id.String() != internal {
		var err error
		if id, err = naming.Parse(internal); err != nil {
			return fmt.Sprintf("ID %q is not an internal ID: %v", internal, err)
		}
	}
	if r.Table != TableDeliveries && TableOf(id) != r.Table {
		return fmt.Sprintf("ID %q does not belong in table %s", r.ID, r.Table)
	}
	if want := id.CloudTaskID(); r.CloudTaskID != want {
		return fmt.Sprintf("cloud_task_id %q of %s is not the Cloud Tasks ID of that ID (want %q)", r.CloudTaskID, r.ID, want)
	}
	if r.UpdatedAt.IsZero() {
		return fmt.Sprintf("record %s has no updated_at", r.ID)
	}
	return ""
}

// Trusted reports whether Distrust finds nothing wrong.
func (r *Record) Trusted() bool { return r.Distrust() == "" }

// Prepare checks a record about to be appended and fills in what every
// implementation's Append promises: ProcessorUUID becomes processor, a
// zero UpdatedAt becomes now, a zero CreatedAt becomes UpdatedAt, an empty
// CloudTaskID becomes the ID's, and times are microsecond UTC. A record
// that would read back as foreign is refused with an error matching
// ErrForeignRecord; one with a bad field with a *RecordError.
func (r *Record) Prepare(processor string, now time.Time) error {
	if err := r.Table.Validate(); err != nil {
		return err
	}
	r.ProcessorUUID = processor
	if r.UpdatedAt.IsZero() {
		r.UpdatedAt = now
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = r.UpdatedAt
	}
	if r.CloudTaskID == "" {
		if !r.id.IsZero() {
			r.CloudTaskID = r.id.CloudTaskID()
		} else {
			internal := r.ID
			if r.Table == TableDeliveries {
				internal, _, _ = SplitDeliveryID(r.ID)
			}
			r.CloudTaskID, _ = naming.CloudTaskID(internal) // Distrust names a bad ID
		}
	}
	r.Normalize()
	if err := r.Validate(); err != nil { // the defaults filled in are checked too
		return err
	}
	reason := r.distrustID()
	r.id = naming.ID{}
	if reason != "" {
		return fmt.Errorf("%w: %s", ErrForeignRecord, reason)
	}
	return nil
}

// Newer reports whether a describes a later state than b of the same ID:
// when both carry a Version (> 0) and they differ, the higher Version
// wins, whatever the clocks of their writers said. Otherwise a later
// UpdatedAt wins; on a tie (possible only across processors) a terminal
// status beats pending, then the larger status, then the larger processor
// UUID, so every reader makes the same choice.
func Newer(a, b *Record) bool {
	if a.Version > 0 && b.Version > 0 && a.Version != b.Version {
		return a.Version > b.Version
	}
	if !a.UpdatedAt.Equal(b.UpdatedAt) {
		return a.UpdatedAt.After(b.UpdatedAt)
	}
	if a.Status.Terminal() != b.Status.Terminal() {
		return a.Status.Terminal()
	}
	if a.Status != b.Status {
		return a.Status > b.Status
	}
	return a.ProcessorUUID > b.ProcessorUUID
}

// Follow sets what a writer derives from prev, the newest record of the
// ID it read before writing r (nil when it read none): Version becomes
// prev.Version+1 (1 for a first record); UpdatedAt becomes now, or one
// microsecond past prev.UpdatedAt when now is not later, so that ordering
// by updated_at agrees with Version whatever the writers' clocks; and
// CreatedAt becomes prev.CreatedAt (UpdatedAt for a first record), so
// every state of an ID names when the ID was first recorded. Times are
// truncated to the microsecond the stores keep.
func (r *Record) Follow(prev *Record, now time.Time) {
	now = truncMicro(now)
	if prev == nil {
		r.Version, r.UpdatedAt, r.CreatedAt = 1, now, now
		return
	}
	r.Version = prev.Version + 1
	r.UpdatedAt = now
	if floor := truncMicro(prev.UpdatedAt).Add(time.Microsecond); !prev.UpdatedAt.IsZero() && r.UpdatedAt.Before(floor) {
		r.UpdatedAt = floor
	}
	r.CreatedAt = prev.CreatedAt
	if r.CreatedAt.IsZero() {
		r.CreatedAt = r.UpdatedAt
	}
}

// Conflicts reports whether a store holding current must refuse r under
// the conditional append rule: r carries a Version (> 0) and current, a
// record of the same table and ID, has one at least as high. Stores call
// it with the newest record they hold or can see.
func (r *Record) Conflicts(current *Record) bool {
	return r.Version > 0 && current.Version >= r.Version
}

// validateTrace checks TraceID and SpanID: both empty, or both lowercase
// hex of the W3C lengths, and not all zeros (an invalid ID).
func (r *Record) validateTrace() error {
	if r.TraceID == "" && r.SpanID == "" {
		return nil
	}
	for _, f := range [...]struct {
		name, v string
		n       int
	}{{"TraceID", r.TraceID, 32}, {"SpanID", r.SpanID, 16}} {
		if !lowerHex(f.v, f.n) {
			return &RecordError{ID: r.ID, Field: f.name, Value: f.v,
				Rule: fmt.Sprintf("is not a trace context ID; allowed: %d lowercase hex digits, not all zero, with TraceID and SpanID both set or both empty", f.n)}
		}
	}
	return nil
}

// lowerHex reports whether s is n lowercase hex digits, not all zero.
func lowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	zero := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '0':
		case '1' <= c && c <= '9', 'a' <= c && c <= 'f':
			zero = false
		default:
			return false
		}
	}
	return !zero
}
