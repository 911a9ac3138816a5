package outbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/naming"
)

// The statuses of the deliveries table: started, written before the
// worker's inbox and handler run, then the outcome the worker answered
// with (the worker package's Outcome of the same name). StatusFailed is
// shared with the other tables.
const (
	// StatusStarted: a verified delivery whose key was checked is about to
	// go through the inbox.
	StatusStarted Status = "started"
	// StatusDone: the handler succeeded and the key's done mark committed.
	StatusDone Status = "done"
	// StatusDuplicate: the key was already finished; the handler was not
	// called.
	StatusDuplicate Status = "duplicate"
	// StatusRetry: the handler returned a retryable error, or the inbox
	// failed; Cloud Tasks retries.
	StatusRetry Status = "retry"
	// StatusPanic: the handler panicked; Cloud Tasks retries.
	StatusPanic Status = "panic"
	// StatusBusy: another delivery held the key too long; Cloud Tasks
	// retries.
	StatusBusy Status = "busy"
	// StatusSlowDown: the handler asked the queue to slow down.
	StatusSlowDown Status = "slow_down"
)

// deliveryStatuses lists the statuses a delivery record may carry, for
// Validate's message.
const deliveryStatuses = "started, done, duplicate, failed, retry, panic, busy, slow_down"

// delivery reports whether s is a status of the deliveries table only.
func (s Status) delivery() bool {
	switch s {
	case StatusStarted, StatusDone, StatusDuplicate, StatusRetry, StatusPanic, StatusBusy, StatusSlowDown:
		return true
	}
	return false
}

// DeliveryFields are the columns only the deliveries table stores.
type DeliveryFields struct {
	// RetryCount is the delivery's X-CloudTasks-TaskRetryCount: the task's
	// earlier attempts, answered or not.
	RetryCount int32
	// ExecutionCount is the delivery's X-CloudTasks-TaskExecutionCount: the
	// earlier attempts that got an answer other than 5xx.
	ExecutionCount int32
	// HTTPStatus is the status the worker answered with; 0 in a started
	// record.
	HTTPStatus int32
	// Latency is how long the worker took from the request's arrival to
	// its answer, at microsecond precision; 0 in a started record.
	Latency time.Duration
}

// deliverySep separates the internal ID from the suffix in a delivery ID.
// Internal IDs never contain it (naming allows [A-Za-z0-9._-] and ':').
const deliverySep = "#"

// DeliveryID returns the ID of one delivery of id's task: the internal ID,
// '#', and suffix, which the worker makes unique per delivery (a UUIDv7,
// so an ID's deliveries sort in the order they arrived). Cloud Tasks may
// deliver one attempt twice with the same counts, so no header makes a
// delivery's ID by itself; a per-delivery ID keeps the two records of each
// delivery together and the deliveries of one task apart when readers
// fold records to their latest state.
func DeliveryID(id naming.ID, suffix string) string { return id.String() + deliverySep + suffix }

// SplitDeliveryID returns the internal ID and the suffix of a delivery ID;
// ok is false when s has no '#' or either part is empty.
func SplitDeliveryID(s string) (internal, suffix string, ok bool) {
	internal, suffix, ok = strings.Cut(s, deliverySep)
	return internal, suffix, ok && internal != "" && suffix != "" && !strings.Contains(suffix, deliverySep)
}

// DeliveryRecordOf returns the record of one delivery of id's task in the
// deliveries table, with the fields the ID determines (Table, ID,
// CloudTaskID, RunID, TaskKey, Attempt, Kind) filled in; suffix makes
// the delivery's ID (DeliveryID). Like RecordOf, its ID is not parsed
// again by Prepare.
func DeliveryRecordOf(id naming.ID, suffix string) Record {
	r := RecordOf(id)
	r.Table, r.ID, r.DueAt = TableDeliveries, DeliveryID(id, suffix), time.Time{}
	return r
}

// validateDelivery checks the fields of a deliveries record: its status,
// and counts, status code and latency that fit it.
func (r *Record) validateDelivery() error {
	d := &r.Delivery
	bad := func(field, value, rule string) error {
		return &RecordError{ID: r.ID, Field: field, Value: value, Rule: rule}
	}
	switch {
	case !r.Status.delivery() && r.Status != StatusFailed:
		return bad("Status", string(r.Status), "is unknown in table "+string(TableDeliveries)+"; allowed: "+deliveryStatuses)
	case d.RetryCount < 0:
		return bad("Delivery.RetryCount", fmt.Sprint(d.RetryCount), "is negative")
	case d.ExecutionCount < 0:
		return bad("Delivery.ExecutionCount", fmt.Sprint(d.ExecutionCount), "is negative")
	case d.Latency < 0:
		return bad("Delivery.Latency", d.Latency.String(), "is negative")
	case r.Status == StatusStarted && (d.HTTPStatus != 0 || d.Latency != 0):
		return bad("Delivery.HTTPStatus", fmt.Sprint(d.HTTPStatus), "must be 0, with a 0 Latency, in a started record: nothing was answered yet")
	case r.Status != StatusStarted && (d.HTTPStatus < 100 || d.HTTPStatus > 599):
		return bad("Delivery.HTTPStatus", fmt.Sprint(d.HTTPStatus), "is not an HTTP status; allowed: 100 to 599 in an outcome record")
	}
	return nil
}

// LookupDeliveries returns the deliveries recorded in o of what q selects
// (an internal ID, a Cloud Tasks ID or a run), arranged as Lookup
// arranges them: by delivery ID, which within a task is the order of
// arrival. q.Table is ignored. An internal ID is looked up by its Cloud
// Tasks ID, the column the deliveries table indexes, and the answer keeps
// that ID's deliveries only; a q.ID that is not an internal ID has none.
// Without q.History each delivery shows its
// latest record: its outcome, or started when its worker never answered.
// q.Summary is ignored too: a summary would leave out the delivery's
// columns.
func LookupDeliveries(ctx context.Context, o Outbox, q Query) ([]Record, error) {
	q.Table, q.Summary = TableDeliveries, false
	internal := q.ID
	if internal != "" {
		cid, err := naming.CloudTaskID(internal)
		if err != nil {
			return nil, nil // as Lookup answers an ID never recorded
		}
		q.ID, q.CloudTaskID = "", cid
	}
	recs, err := o.Lookup(ctx, q)
	if err != nil || internal == "" {
		return recs, err
	}
	kept := recs[:0]
	for _, r := range recs {
		if id, _, _ := SplitDeliveryID(r.ID); id == internal {
			kept = append(kept, r)
		}
	}
	return kept, nil
}
