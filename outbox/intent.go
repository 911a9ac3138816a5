package outbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ctdispatch/ctdispatch/naming"
)

// Tx is a caller's open database transaction, as a store that records
// inside it (Intents) needs it: statements with $1 placeholders. Package
// outbox/pgbox makes one of a *sql.Tx (pgbox.SQLTx) and package
// outbox/pgbox/pgxtx of a pgx.Tx, so that only programs that use pgx link
// it.
type Tx interface {
	// Exec runs a statement and returns how many rows it affected.
	Exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	// Query runs a statement that returns rows.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Rows is the result of Tx.Query, read as database/sql's *sql.Rows is.
type Rows interface {
	// Next prepares the next row for Scan and reports whether there is one.
	Next() bool
	// Scan copies the current row's columns into dest.
	Scan(dest ...any) error
	// Err returns the error, if any, that ended the iteration.
	Err() error
	// Close frees the rows; it is safe to call more than once.
	Close()
}

// Intent is a task to create (or to delete) that a caller's transaction
// recorded, for a relay to create (or delete) once that transaction has
// committed. A create is recorded together with the pending record of its
// ID.
type Intent struct {
	// Delete makes the intent a cancel: the relay deletes the ID's task
	// and records the cancel as a dispatcher's Cancel does. Request is
	// then empty.
	Delete bool
	// Table is the table of the ID's records: TableDispatch or
	// TableTimers.
	Table Table
	// ID is the internal ID.
	ID string
	// Version is the Version of the pending record written with a create
	// intent: the relay records the outcome as the version after it, and
	// only while it is still the ID's latest. For a delete, the ID's
	// version when the cancel was recorded (0 when it had none).
	Version int64
	// Queue is the full resource name of the task's queue.
	Queue string
	// Request is the whole CreateTask request (a
	// cloudtaskspb.CreateTaskRequest in protobuf encoding): task name,
	// HTTP target, headers, body, OIDC settings and schedule time.
	Request []byte
	// CreatedAt is when the intent was recorded.
	CreatedAt time.Time
}

// Intents is implemented by an Outbox that records dispatches inside a
// caller's database transaction and hands them to relays after it commits
// (package outbox/pgbox). A dispatcher's DispatchTx and ScheduleTimerTx
// use it, and so does its relay.
type Intents interface {
	// LatestTx is Latest read inside tx, so that it sees what tx wrote and
	// locks nothing.
	LatestTx(ctx context.Context, tx Tx, t Table, id string) (r Record, ok bool, err error)
	// AppendIntent appends r, a pending record, and in, its task, inside
	// tx: both are kept if and only if tx commits. r is conditional on its
	// Version as Append is (a *VersionConflictError when the ID has that
	// Version or a higher one); in replaces an intent of the same ID that
	// no relay has finished.
	AppendIntent(ctx context.Context, tx Tx, r Record, in Intent) error
	// AppendCancel appends in, a delete intent (no record), inside tx,
	// replacing an unfinished intent of the same ID: a create not yet
	// relayed is then never made.
	AppendCancel(ctx context.Context, tx Tx, in Intent) error
	// HasIntent reports whether id has an intent that no relay has
	// finished, as committed now.
	HasIntent(ctx context.Context, id string) (bool, error)
	// ClaimIntents returns up to max committed intents whose queue is one
	// of queues (full resource names), oldest first, leaving out those
	// another claim holds, and claims them for claimFor: until then no
	// other ClaimIntents returns them. It runs in a short transaction of
	// its own.
	ClaimIntents(ctx context.Context, queues []string, max int, claimFor time.Duration) ([]Intent, error)
	// DropIntent removes in once a relay has recorded its outcome (or
	// found the ID moved on). An intent a later transaction recorded in
	// its place (another Version, or a delete) is kept; it stays claimed
	// while the older one is worked on, and DropIntent releases it.
	DropIntent(ctx context.Context, in Intent) error
	// ReleaseIntents gives up this store's claims on ins, intents its
	// relay claimed and will not work on (it is stopping, or the database
	// failed under it), so that the next ClaimIntents of any relay returns
	// them at once instead of after the claim time. An intent finished
	// meanwhile, or claimed by another processor since its claim expired,
	// is left as it is. A store that sends Notices wakes the listening
	// relays when it released any.
	ReleaseIntents(ctx context.Context, ins []Intent) error
}

// BulkIntents is implemented by an Intents store that reads and records
// many IDs at once inside a caller's transaction, in one statement each
// (package outbox/pgbox, and Memory), so that a dispatcher's
// DispatchManyTx costs two statements however many requests its batch
// holds. A dispatcher whose store lacks it calls LatestTx and
// AppendIntent once per ID instead, with the same answers.
type BulkIntents interface {
	// LatestManyTx is LatestTx of each of ids, all of table t, read
	// inside tx: the newest record of every ID that has one, by ID. An
	// ID never recorded has no entry.
	LatestManyTx(ctx context.Context, tx Tx, t Table, ids []string) (map[string]Record, error)
	// AppendIntents is AppendIntent of rs[i] and ins[i] for every i,
	// inside tx, in one go. Each record is conditional on its own
	// Version as AppendIntent's is: one refused is left out with its
	// intent, and refused holds its *VersionConflictError, in the order
	// of rs; the others are appended, each with its intent, and kept if
	// and only if tx commits. A store that sends Notices sends
	// NoticeIntents once for the call, as AppendIntent does. A batch
	// PrepareIntents refuses (a bad record or intent, an ID twice) is
	// its *RecordError, and nothing is appended.
	AppendIntents(ctx context.Context, tx Tx, rs []Record, ins []Intent) (refused []*VersionConflictError, err error)
}

// PrepareIntents checks a batch of AppendIntents as every store does
// before it writes anything: ins pairs with rs (the same length), every
// record is of one table, no ID comes twice, and each record, filled in
// by Record.Prepare with processor and now, goes with its intent as
// Intent.Validate requires.
// It returns the records filled in, in a slice of its own: rs is left as
// it is. Errors are *RecordErrors naming the field.
func PrepareIntents(rs []Record, ins []Intent, processor string, now time.Time) ([]Record, error) {
	if len(ins) != len(rs) {
		return nil, &RecordError{Field: "Intent", Value: fmt.Sprintf("%d intents", len(ins)), Rule: fmt.Sprintf("must pair with the %d records, one each", len(rs))}
	}
	out := slices.Clone(rs)
	seen := make(map[string]int, len(rs))
	for i := range out {
		r := &out[i]
		if r.Table != out[0].Table {
			return nil, &RecordError{ID: r.ID, Field: "Table", Value: string(r.Table), Rule: fmt.Sprintf("differs from the first record's (%s): a batch appends to one table", out[0].Table)}
		}
		if j, ok := seen[r.ID]; ok {
			return nil, &RecordError{ID: r.ID, Field: "ID", Value: r.ID, Rule: fmt.Sprintf("comes twice, at %d and %d: a batch appends one record per ID", j, i)}
		}
		seen[r.ID] = i
		if err := r.Prepare(processor, now); err != nil {
			return nil, err
		}
		if err := ins[i].Validate(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// IntentReserver is implemented by an Intents store that records an ID's
// first intent without a read before it (package outbox/pgbox, and
// Memory): a dispatcher's DispatchTx and ScheduleTimerTx try it first,
// so that dispatching a new ID costs one statement in the caller's
// transaction, and read the ID only when it is refused.
type IntentReserver interface {
	// ReserveIntent appends r, an ID's first pending record (Version 1),
	// and in, its intent, inside tx, as AppendIntent does, unless tx sees
	// a record of the ID (of any version, 0 included) or another
	// transaction commits the ID's version 1 first: then it appends
	// nothing and returns kept false, and the caller reads the ID
	// (LatestTx) and appends what follows it. A record that is not
	// Version 1 is a *RecordError.
	ReserveIntent(ctx context.Context, tx Tx, r Record, in Intent) (kept bool, err error)
}

// OutcomeAppender is implemented by an Intents store that records a
// relayed intent's outcome and drops the intent in one write (pgbox: in
// the statement that appends the record, beside the concurrent appends
// it groups). A relay uses it when its outbox has it, and Append, then
// DropIntent, otherwise.
type OutcomeAppender interface {
	// AppendOutcome appends r, the outcome of the create intent in, as
	// Append does (conditional on r.Version), returns once it is kept,
	// and drops in as DropIntent does, in the same write: in is dropped
	// when r is kept and when r is refused with a *VersionConflictError
	// (the ID moved on, and in has nothing left to do), and on any other
	// error neither happened, or, when the error matches ErrKeptUnknown,
	// both may have.
	AppendOutcome(ctx context.Context, r Record, in Intent) error
}

// CheckOutcome checks that in, whose outcome r is, is a create intent of
// r's ID, as every OutcomeAppender does before it writes; the error is a
// *RecordError naming the intent.
func CheckOutcome(r *Record, in *Intent) error {
	if r.Table != TableDispatch && r.Table != TableTimers {
		return &RecordError{ID: r.ID, Field: "Table", Value: string(r.Table), Rule: "has no intents; allowed: dispatch_outbox, timers"}
	}
	if in.Delete || in.ID != r.ID || in.Table != r.Table {
		return &RecordError{ID: r.ID, Field: "Intent", Value: fmt.Sprintf("%s %s delete=%t", in.Table, in.ID, in.Delete),
			Rule: fmt.Sprintf("must be the create intent whose outcome the record is (%s %s)", r.Table, r.ID)}
	}
	return nil
}

// The payloads of the notifications a store that implements Notices
// sends on its NoticeChannel. A transaction sends each at most once,
// however many intents it records.
const (
	// NoticeIntents says that a transaction committed intents (or that a
	// relay released some): relays wake and claim.
	NoticeIntents = "intents"
	// NoticeOutcomes says that a relay recorded outcomes of intents and
	// dropped them: WaitOutcome reads again.
	NoticeOutcomes = "outcomes"
)

// Notices is implemented by an Intents store that tells listeners when
// there is work for a relay, so that relays need not poll for it: the
// statements that record intents (AppendIntent, AppendCancel and
// AppendIntents) send NoticeIntents inside their transaction, so that
// only a commit wakes anyone, at most once per NoticeGap (a transaction
// within the gap of the one before sends none: the relay that one woke
// looks again NoticeGap later), ReleaseIntents sends it too, and
// NotifyOutcomes sends NoticeOutcomes. The notifications reach a Listener the program supplies
// (package outbox/pgbox/pgxlisten for PostgreSQL, whose NOTIFY pgbox
// sends). Delivery is best effort: a listener that was not listening
// misses them, so a relay still polls, less often.
type Notices interface {
	// NoticeChannel returns the channel the store's notifications go to,
	// or "" when it sends none (pgbox.Config.NoNotify).
	NoticeChannel() string
	// NoticeGap returns how long after a notification of intents the
	// store sends no other (0: one per transaction): a relay woken by
	// one looks again this much later.
	NoticeGap() time.Duration
	// NotifyOutcomes sends NoticeOutcomes in a statement of its own.
	NotifyOutcomes(ctx context.Context) error
}

// Listener receives a store's notifications for a dispatcher
// (cloudtasks.Config.Listener): the program supplies one, since it holds
// a connection of its own that the store's pool must not lend out
// (package outbox/pgbox/pgxlisten makes one over pgx).
type Listener interface {
	// Listen listens on channel until ctx ends, and then returns
	// ctx.Err(). It calls notify with each notification's payload, one
	// call at a time, and with "" each time it starts listening, the
	// first time and after every reconnection: notifications sent while
	// it was not listening are lost, so the dispatcher then looks for
	// work as if notified. It reconnects by itself after the connection
	// drops; an error it returns before ctx ends (a channel it cannot
	// listen on) leaves the dispatcher polling.
	Listen(ctx context.Context, channel string, notify func(payload string)) error
}

// Validate checks an intent as every store that records intents does
// before it writes anything. A create (Delete false) goes with r, its
// pending record, already filled in by Record.Prepare: r must be pending,
// conditional (Version 1 or above) and of dispatch_outbox or timers, and
// the intent must name its table, ID, version and queue and hold the
// request. A delete goes without a record (r is nil): it must name a table
// with intents, an internal ID, a queue, and a version that is not
// negative. Errors are *RecordErrors naming the field.
func (in *Intent) Validate(r *Record) error {
	if !in.Delete {
		return in.validateCreate(r)
	}
	if r != nil {
		return &RecordError{ID: in.ID, Field: "Intent.Delete", Value: "true", Rule: "must be false for an intent with a record: a delete writes none (AppendCancel)"}
	}
	switch {
	case in.Table != TableDispatch && in.Table != TableTimers:
		return &RecordError{ID: in.ID, Field: "Intent.Table", Value: string(in.Table), Rule: "has no intents; allowed: dispatch_outbox, timers"}
	case in.ID == "" || in.Queue == "":
		return &RecordError{ID: in.ID, Field: "Intent", Value: fmt.Sprintf("ID %q, queue %q", in.ID, in.Queue), Rule: "needs an ID and a queue"}
	case in.Version < 0:
		return &RecordError{ID: in.ID, Field: "Intent.Version", Value: fmt.Sprint(in.Version), Rule: "is negative"}
	}
	if _, err := naming.CloudTaskID(in.ID); err != nil {
		return &RecordError{ID: in.ID, Field: "Intent.ID", Value: in.ID, Rule: err.Error()}
	}
	return nil
}

// validateCreate is Validate for a create intent and its pending record.
func (in *Intent) validateCreate(r *Record) error {
	switch {
	case r == nil:
		return &RecordError{ID: in.ID, Field: "Intent.Delete", Value: "false", Rule: "must be true: a create intent goes with its pending record (AppendIntent)"}
	case r.Table == TableDeliveries:
		return &RecordError{ID: r.ID, Field: "Table", Value: string(r.Table), Rule: "has no intents; allowed: dispatch_outbox, timers"}
	case r.Status != StatusPending:
		return &RecordError{ID: r.ID, Field: "Status", Value: string(r.Status), Rule: "must be pending: an intent's record is the pending one"}
	case r.Version < 1:
		return &RecordError{ID: r.ID, Field: "Version", Value: fmt.Sprint(r.Version), Rule: "must be 1 or above: an intent's record is conditional"}
	case in.ID != r.ID || in.Table != r.Table || in.Version != r.Version || in.Queue != r.Queue:
		return &RecordError{ID: r.ID, Field: "Intent", Value: fmt.Sprintf("%s %s v%d in %s", in.Table, in.ID, in.Version, in.Queue),
			Rule: fmt.Sprintf("must name the record's table, ID, version and queue (%s %s v%d in %s)", r.Table, r.ID, r.Version, r.Queue)}
	case len(in.Request) == 0:
		return &RecordError{ID: r.ID, Field: "Intent.Request", Rule: "is empty: the relay needs the whole CreateTask request"}
	}
	return nil
}
