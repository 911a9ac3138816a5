package worker

import (
	"database/sql"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/cloudtasks/internal/taskheader"
	"github.com/ctdispatch/ctdispatch/naming"
)

// The request headers a worker reads. Cloud Tasks sets the X-CloudTasks-*
// ones; the dispatcher sets Idempotency-Key and X-Ctdispatch-Task-Id on
// every task it creates.
const (
	// HeaderQueueName carries the queue's ID.
	HeaderQueueName = taskheader.QueueName
	// HeaderTaskName carries the task's ID (not its full resource name).
	HeaderTaskName = taskheader.TaskName
	// HeaderRetryCount counts the task's earlier attempts.
	HeaderRetryCount = taskheader.RetryCount
	// HeaderExecutionCount counts the earlier attempts answered with
	// anything but 5xx.
	HeaderExecutionCount = taskheader.ExecutionCount
	// HeaderETA carries the task's schedule time in fractional seconds
	// since the Unix epoch.
	HeaderETA = taskheader.ETA
	// HeaderPreviousResponse carries the status the previous attempt got.
	HeaderPreviousResponse = taskheader.PreviousResponse
	// HeaderRetryReason says why the task is retried.
	HeaderRetryReason = taskheader.RetryReason
	// HeaderIdempotencyKey carries the task's internal ID, set by the
	// dispatcher.
	HeaderIdempotencyKey = taskheader.IdempotencyKey
	// HeaderCtdispatchTaskID carries the task's Cloud Tasks ID as the
	// dispatcher computed it.
	HeaderCtdispatchTaskID = taskheader.TaskID
)

// Delivery is one verified delivery of a task, as the handler sees it.
type Delivery struct {
	// ID is the task's internal ID, parsed from Idempotency-Key and checked
	// against the task's name. It is the zero ID only for a task without
	// the header, which reaches the handler only with Config.AcceptUnkeyed.
	ID naming.ID
	// Queue is the queue's ID (X-CloudTasks-QueueName).
	Queue string
	// TaskName is the task's ID, the last part of its resource name
	// (X-CloudTasks-TaskName): ID.CloudTaskID() for a ctdispatch task.
	TaskName string
	// RetryCount counts the earlier attempts of the task, answered or not
	// (X-CloudTasks-TaskRetryCount).
	RetryCount int
	// ExecutionCount counts the earlier attempts that got an answer other
	// than 5xx (X-CloudTasks-TaskExecutionCount).
	ExecutionCount int
	// ETA is when the task was scheduled to run (X-CloudTasks-TaskETA).
	ETA time.Time
	// PreviousResponse is the status the previous attempt got, 0 on the
	// first attempt or when it got none (X-CloudTasks-TaskPreviousResponse).
	PreviousResponse int
	// RetryReason says why the task is being retried, "" on the first
	// attempt (X-CloudTasks-TaskRetryReason).
	RetryReason string
	// ServiceAccount is the verified "email" claim of the request's token,
	// "" when verification is off.
	ServiceAccount string
	// Header is the request's header, for the task's own headers such as
	// Content-Type.
	Header http.Header
	// Body is the request body, read in full (at most Config.MaxBodyBytes).
	Body []byte

	tx *sql.Tx
}

// Tx is the inbox transaction the handler's writes belong in: they commit
// together with the key's done mark, or not at all. It is nil with an
// inbox that has no database (MemoryInbox) and for unkeyed tasks. It is
// valid only until the handler returns; the handler must not Commit or
// Roll it back.
func (d *Delivery) Tx() *sql.Tx { return d.tx }

// parseDelivery reads the Cloud Tasks and ctdispatch headers of a request
// into a Delivery and checks that they fit together: the Idempotency-Key is
// an internal ID whose Cloud Tasks ID is the task's name (and the
// X-Ctdispatch-Task-Id, when present). Without an Idempotency-Key the
// delivery is refused unless acceptUnkeyed is set. Every error is a
// *HeaderError.
func parseDelivery(h http.Header, acceptUnkeyed bool) (Delivery, error) {
	d := Delivery{Header: h}
	var err error
	if d.Queue, err = required(h, HeaderQueueName); err != nil {
		return d, err
	}
	if d.TaskName, err = required(h, HeaderTaskName); err != nil {
		return d, err
	}
	if d.RetryCount, err = count(h, HeaderRetryCount, true); err != nil {
		return d, err
	}
	if d.ExecutionCount, err = count(h, HeaderExecutionCount, true); err != nil {
		return d, err
	}
	if d.PreviousResponse, err = count(h, HeaderPreviousResponse, false); err != nil {
		return d, err
	}
	if d.ETA, err = parseETA(h.Get(HeaderETA)); err != nil {
		return d, err
	}
	d.RetryReason = h.Get(HeaderRetryReason)

	key := h.Get(HeaderIdempotencyKey)
	ctTaskID := h.Get(HeaderCtdispatchTaskID)
	if key == "" {
		if !acceptUnkeyed {
			return d, &HeaderError{Header: HeaderIdempotencyKey, Rule: "is missing; this worker accepts only tasks dispatched by ctdispatch (Config.AcceptUnkeyed lets others through)"}
		}
		if ctTaskID != "" {
			return d, &HeaderError{Header: HeaderIdempotencyKey, Rule: "is missing although " + HeaderCtdispatchTaskID + " " + strconv.Quote(ctTaskID) + " says the task is ctdispatch's"}
		}
		return d, nil
	}
	if d.ID, err = naming.Parse(key); err != nil {
		return d, &HeaderError{Header: HeaderIdempotencyKey, Value: key, Rule: "is not an internal ID: " + err.Error()}
	}
	want := d.ID.CloudTaskID()
	if d.TaskName != want {
		return d, &HeaderError{Header: HeaderIdempotencyKey, Value: key, Rule: "names task " + want + " but was delivered by task " + strconv.Quote(d.TaskName) + " (" + HeaderTaskName + ")"}
	}
	if ctTaskID != "" && ctTaskID != want {
		return d, &HeaderError{Header: HeaderCtdispatchTaskID, Value: ctTaskID, Rule: "differs from task " + want + ", which " + HeaderIdempotencyKey + " " + strconv.Quote(key) + " names"}
	}
	return d, nil
}

func required(h http.Header, name string) (string, error) {
	v := h.Get(name)
	if v == "" {
		return "", &HeaderError{Header: name, Rule: "is missing; Cloud Tasks sets it on every delivery"}
	}
	return v, nil
}

// count parses a non-negative decimal count; an absent optional header is 0.
func count(h http.Header, name string, mandatory bool) (int, error) {
	v := h.Get(name)
	if v == "" {
		if mandatory {
			return 0, &HeaderError{Header: name, Rule: "is missing; Cloud Tasks sets it on every delivery"}
		}
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || v[0] == '+' {
		return 0, &HeaderError{Header: name, Value: v, Rule: "is not a count; allowed: a decimal number from 0"}
	}
	return n, nil
}

// parseETA reads seconds since the epoch with an optional fraction
// ("1764061200.123456") without going through a float, so no nanosecond is
// lost or invented.
func parseETA(v string) (time.Time, error) {
	bad := &HeaderError{Header: HeaderETA, Value: v, Rule: "is not a time; allowed: seconds since the Unix epoch, with up to 9 decimals"}
	if v == "" {
		return time.Time{}, &HeaderError{Header: HeaderETA, Rule: "is missing; Cloud Tasks sets it on every delivery"}
	}
	secText, fracText, hasFrac := strings.Cut(v, ".")
	if secText == "" || !digits(secText) || (hasFrac && (fracText == "" || len(fracText) > 9 || !digits(fracText))) {
		return time.Time{}, bad
	}
	sec, err := strconv.ParseInt(secText, 10, 64)
	if err != nil || sec > maxETASeconds {
		return time.Time{}, bad
	}
	var nanos int64
	if hasFrac {
		nanos, _ = strconv.ParseInt(fracText+strings.Repeat("0", 9-len(fracText)), 10, 64)
	}
	return time.Unix(sec, nanos).UTC(), nil
}

// maxETASeconds is the start of the year 10000: any later ETA is garbage.
const maxETASeconds = 253402300800

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
