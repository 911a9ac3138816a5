package outbox

import (
	"context"
	"fmt"
	"time"
)

// Outbox is a store of records: what a dispatcher needs to remember what it
// did. Package outbox/parquetbox implements it with Parquet files any
// number of processes share; Memory implements it in one process's memory.
// Package outboxtest is the conformance suite every implementation passes.
// Implementations are safe for concurrent use.
type Outbox interface {
	// ProcessorUUID names the process in every record it writes.
	ProcessorUUID() string
	// Append checks r, fills it in as Record.Prepare does, and queues it.
	// done, when not nil, is called exactly once: with nil once r is kept
	// as durably as the implementation promises, or with the error that
	// kept it from being kept. An error found at once (r is invalid or
	// foreign, the store is closed or unavailable, ctx has ended) is
	// returned instead, nothing is kept, and done is not called. done may
	// run before Append returns or on another goroutine; it must return
	// quickly and must not call the outbox. Within one processor, records
	// are kept in the order Append was called.
	//
	// Append is conditional on Version: a record whose Version is > 0 is
	// refused when the store holds (or, for a store that cannot hold a
	// lock across processes, can see) a record of the same table and ID
	// with a Version at least as high, with a *VersionConflictError
	// (matching ErrVersionConflict) whose Current is that record, either
	// returned or given to done. Version 0 is unconditional.
	Append(ctx context.Context, r Record, done func(error)) error
	// Latest returns the current state of an ID (its newest record, see
	// Newer), read from every process's records as fresh as the store
	// allows; ok is false when the ID was never recorded. A store that
	// finds the highest Version written twice, by different processors
	// with different statuses, returns the newest by Newer together with a
	// *ConcurrentWritesError (matching ErrConcurrentWrites).
	Latest(ctx context.Context, t Table, id string) (r Record, ok bool, err error)
	// Lookup returns the records matching q, arranged as Arrange does.
	Lookup(ctx context.Context, q Query) ([]Record, error)
	// Pending returns the records of table t whose latest state is
	// pending and was written more than olderThan ago, by any processor,
	// in the order SortPending gives.
	Pending(ctx context.Context, t Table, olderThan time.Duration) ([]Record, error)
	// Flush makes every record appended so far as durable and as readable
	// to others as the implementation can (for parquetbox: in Parquet
	// files). A dispatcher calls it when it closes.
	Flush(ctx context.Context) error
}

// FreshReader is implemented by an Outbox whose Latest may answer from a
// view of other processes' records older than the store could read (a
// parquetbox reuses its listing of others' logs and files for
// RefreshInterval), or that cannot read some of their records at all
// until they publish them (a parquetbox on a bucket: others' logs stay on
// their machines). A dispatcher calls LatestFresh before it answers a
// repeat from the outbox without a Cloud Tasks call. Memory and pgbox
// read every kept record in Latest and do not implement it.
type FreshReader interface {
	Outbox
	// LatestFresh is Latest read after looking again at every process's
	// records, as fresh as the store can read them. unseen bounds how long
	// a record another process has kept may stay unreadable here even so:
	// 0 when this read sees every kept record; on a bucket, the interval
	// at which processes publish their logs. A caller for whom a record not
	// yet seen would change the answer asks another source when unseen
	// is above 0.
	LatestFresh(ctx context.Context, t Table, id string) (r Record, ok bool, unseen time.Duration, err error)
}

// Checker is implemented by an Outbox that can tell before its first
// record whether it can keep records at all: a database whose tables are
// not made cannot. A dispatcher calls Check once, when it is made.
type Checker interface {
	// Check returns nil when the store can keep records; an error
	// matching ErrNotReady, saying what is missing and how to make it,
	// when it cannot; any other error when the check could not be made.
	Check(ctx context.Context) error
}

// Announcer is implemented by an Outbox whose processes can each write an
// ID's first record blind of the others (a parquetbox: there is no lock
// across processes), so that two processes with different default queues
// can each create the ID's task in their own (docs/consistency.md). Each
// process announces its default queue where the others read it, and one
// whose default differs from a live process's can say so. Memory (one
// process) and pgbox (the second first record is refused) do not
// implement it.
type Announcer interface {
	Outbox
	// Announce publishes p, whose ProcessorUUID must be the outbox's, for
	// as long as the outbox stays open, replacing what it announced
	// before.
	Announce(ctx context.Context, p Process) error
	// Announced returns what the live processes sharing the outbox (this
	// one among them) announced, sorted by ProcessorUUID. A process that
	// announced nothing, such as one of a version before announcements,
	// is not listed.
	Announced(ctx context.Context) ([]Process, error)
}

// Process is what a process sharing an outbox announces about itself.
type Process struct {
	// ProcessorUUID names the process, as its records do.
	ProcessorUUID string `json:"processor_uuid"`
	// DefaultQueue is the full name of the queue its dispatcher uses for a
	// call that names none (projects/P/locations/L/queues/Q); empty when
	// it has none.
	DefaultQueue string `json:"default_queue,omitempty"`
}

// DefaultQueuesDiffer reports whether two of the processes announced
// different default queues (one without a default queue differs from
// none).
func DefaultQueuesDiffer(ps []Process) bool {
	first := ""
	for _, p := range ps {
		switch {
		case p.DefaultQueue == "":
		case first == "":
			first = p.DefaultQueue
		case p.DefaultQueue != first:
			return true
		}
	}
	return false
}

// AppendAndWait appends r to o and returns once it is kept, with the error
// that kept it from being kept, or ctx's error if ctx ends first (r may
// still be kept: the error matches ErrKeptUnknown too).
func AppendAndWait(ctx context.Context, o Outbox, r Record) error {
	ch := make(chan error, 1)
	if err := o.Append(ctx, r, func(err error) { ch <- err }); err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	default:
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrKeptUnknown, ctx.Err())
	}
}
