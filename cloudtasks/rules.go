package cloudtasks

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// The dispatcher's rules, as functions over values without I/O: what an
// ID's recorded state means for a new call, what a Cloud Tasks answer
// means for the record, which queue a cancel deletes in. The direct path,
// the transactional path, the relay, Cancel and Recover all decide through
// them; the methods around them only read, call and write.

// repeat is what an ID's newest record means for a new create of it.
type repeat uint8

const (
	// repeatCall: no record says the task exists (none yet, failed,
	// not_found, cancelled, or a pending record whose named call a repeat
	// may make again): call CreateTask.
	repeatCall repeat = iota
	// repeatSkip: created or already_existed with the same payload: the
	// answer is already_existed without a call.
	repeatSkip
	// repeatConflict: a live record holds another payload.
	repeatConflict
	// repeatNotOwner: another processor's pending record, with ownership
	// enforced.
	repeatNotOwner
)

// onRecord decides a create, with payload fingerprint fp, of an ID whose
// newest record is prev, made by processor; enforce is
// Config.EnforceOwnership.
func onRecord(prev *outbox.Record, fp, processor string, enforce bool) repeat {
	switch prev.Status {
	case outbox.StatusCreated, outbox.StatusAlreadyExisted, outbox.StatusPending:
		if prev.PayloadSHA256 != "" && prev.PayloadSHA256 != fp {
			return repeatConflict
		}
	}
	switch prev.Status {
	case outbox.StatusCreated, outbox.StatusAlreadyExisted:
		return repeatSkip
	case outbox.StatusPending:
		if prev.ProcessorUUID != processor && enforce {
			return repeatNotOwner
		}
	}
	return repeatCall
}

// recovers reports whether a create over prev finishes an interrupted
// call: prev is pending and older than staleAfter at now.
func recovers(prev *outbox.Record, now time.Time, staleAfter time.Duration) bool {
	return prev.Status == outbox.StatusPending && now.Sub(prev.UpdatedAt) >= staleAfter
}

// deletedByCancel reports whether r is the record of a Cancel that deleted
// the task (ErrorCode empty), or of a later call that met the name the
// delete left held (ErrorCode ALREADY_EXISTS).
func deletedByCancel(r *outbox.Record) bool {
	return r.Status == outbox.StatusCancelled && (r.ErrorCode == "" || r.ErrorCode == codes.AlreadyExists.String())
}

// createVerdict is what a CreateTask answer means for the ID's record.
type createVerdict struct {
	// status is created, already_existed or failed; "" when the answer
	// leaves it unknown whether the task exists (the record stays pending).
	status outbox.Status
	code   codes.Code
}

// onCreate reads the last answer err of the create calls; ended reports
// whether the work's context ended, which leaves the answer unknown like a
// transient code. An ALREADY_EXISTS is already_existed here: a caller that
// knows of a cancel asks whether the name is held instead.
func onCreate(err error, ended bool) createVerdict {
	code := codeOf(err)
	switch {
	case err == nil:
		return createVerdict{status: outbox.StatusCreated, code: code}
	case code == codes.AlreadyExists:
		return createVerdict{status: outbox.StatusAlreadyExisted, code: code}
	case transient(code) || ended:
		return createVerdict{code: code}
	}
	return createVerdict{status: outbox.StatusFailed, code: code}
}

// onGet is what a GetTask answer means for a pending record Recover
// resolves: already_existed when the task exists, not_found when it does
// not; ok is false for any other answer, which decides nothing.
func onGet(err error) (status outbox.Status, ok bool) {
	switch codeOf(err) {
	case codes.OK:
		return outbox.StatusAlreadyExisted, true
	case codes.NotFound:
		return outbox.StatusNotFound, true
	}
	return "", false
}

// deleteVerdict is what a cancel's DeleteTask answer means.
type deleteVerdict struct {
	outcome CancelOutcome
	// record is true when the cancel is recorded; false when nothing
	// changed (an unknown ID, or a cancel already recorded).
	record bool
	// failed is true when the call failed: the caller's error.
	failed bool
}

// onDelete reads the last answer err of a cancel's delete calls, for an ID
// the outbox knows (its newest record prev) or not.
func onDelete(err error, known bool, prev *outbox.Record) deleteVerdict {
	switch code := codeOf(err); {
	case err == nil:
		return deleteVerdict{outcome: CancelDeleted, record: true}
	case code == codes.NotFound && !known:
		return deleteVerdict{outcome: CancelUnknown}
	case code == codes.NotFound:
		// A cancel already recorded stays the latest: it may say that it
		// deleted the task.
		return deleteVerdict{outcome: CancelAlreadyGone, record: prev.Status != outbox.StatusCancelled}
	}
	return deleteVerdict{failed: true}
}

// cancelQueue is the queue path a cancel of key deletes in: the one the
// outbox recorded (prev, when known), which queue may name or leave empty;
// for an unknown ID, queue, which is then required. queueOf turns a queue
// ID into its path.
func cancelQueue(key string, prev *outbox.Record, known bool, queue string, queueOf func(string) string) (string, error) {
	switch {
	case known && queue != "" && queueOf(queue) != prev.Queue:
		return "", &RequestError{Field: "Queue", Value: queue,
			Rule: fmt.Sprintf("differs from the queue the outbox recorded for %s (%s); leave it empty or name that queue", key, prev.Queue)}
	case known:
		return prev.Queue, nil
	case queue == "":
		return "", &RequestError{Field: "Queue",
			Rule: fmt.Sprintf("is required: the outbox has no record of %s, so it cannot tell which queue holds the task", key)}
	}
	return queueOf(queue), nil
}
