package outbox

import (
	"fmt"
	"time"
)

// Table names one of the two tables of the outbox. Each table is a directory
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
)

// Tables lists every table, in a stable order.
var Tables = []Table{TableDispatch, TableTimers}

// idColumn is the name of the table's internal ID column.
func (t Table) idColumn() string {
	if t == TableTimers {
		return "timer_id"
	}
	return "dispatch_id"
}

func (t Table) validate() error {
	switch t {
	case TableDispatch, TableTimers:
		return nil
	}
	return fmt.Errorf("outbox: table %q unknown; allowed: %q, %q", string(t), TableDispatch, TableTimers)
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
// pending. Retention only ever drops records in a terminal status.
func (s Status) Terminal() bool {
	switch s {
	case StatusCreated, StatusAlreadyExisted, StatusFailed, StatusCancelled, StatusNotFound:
		return true
	}
	return false
}

// Record is one state of one dispatch or timer: a row of the outbox.
//
// A dispatch or timer has a history of records (pending, then an outcome);
// the latest one by UpdatedAt is its current state.
type Record struct {
	// Table is the table the record belongs to.
	Table Table
	// ID is the internal ID (dispatch_id or timer_id), for example
	// dispatch:run1:extract:1.
	ID string
	// CloudTaskID is the Cloud Tasks task ID derived from ID (d_… or t_…).
	CloudTaskID string
	// TaskName is the full task resource name. It is not stored: it is
	// derived from Queue and CloudTaskID when a record is read, and filled
	// in the same way on Append when left empty.
	TaskName string
	// Queue is the full queue resource name
	// (projects/…/locations/…/queues/…).
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
	// ErrorCode is the gRPC code name of the last error, or "".
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
	// DueAt is when a timer fires; zero for dispatches.
	DueAt time.Time
}

// normalize fills derived fields and truncates times to the microsecond
// precision that the files store, so a record reads back equal.
func (r *Record) normalize() {
	r.CreatedAt = truncMicro(r.CreatedAt)
	r.UpdatedAt = truncMicro(r.UpdatedAt)
	r.DueAt = truncMicro(r.DueAt)
	if r.Table == TableDispatch {
		r.Kind = "dispatch"
		r.DueAt = time.Time{}
	}
	r.TaskName = taskName(r.Queue, r.CloudTaskID)
}

func taskName(queue, cloudTaskID string) string {
	if queue == "" || cloudTaskID == "" {
		return ""
	}
	return queue + "/tasks/" + cloudTaskID
}

func truncMicro(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.UnixMicro(t.UnixMicro()).UTC()
}

func (r *Record) validate() error {
	if err := r.Table.validate(); err != nil {
		return err
	}
	if r.ID == "" {
		return fmt.Errorf("outbox: record ID is empty")
	}
	switch r.Status {
	case StatusPending, StatusCreated, StatusAlreadyExisted, StatusFailed, StatusCancelled, StatusNotFound:
	default:
		return fmt.Errorf("outbox: record %s: status %q unknown; allowed: pending, created, already_existed, failed, cancelled, not_found", r.ID, r.Status)
	}
	return nil
}

// newer reports whether a describes a later state than b of the same ID: a
// later UpdatedAt wins; on a tie (possible only across processors) a
// terminal status beats pending, then the larger processor UUID wins so the
// choice is the same everywhere.
func newer(a, b *Record) bool {
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
