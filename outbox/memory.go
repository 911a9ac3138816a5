package outbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
)

// Memory is an Outbox held in one process's memory, for a dispatcher
// that needs no record past its process and for tests. It follows the
// same rules as every Outbox (checked by the conformance suite in package
// outboxtest): the same validation and refusal of foreign records,
// microsecond UTC times, UpdatedAt strictly increasing per ID, conditional
// append by Version, Pending oldest first. It keeps every state of every
// ID until it is dropped, and forgets everything when it is. Its methods
// are safe for concurrent use.
//
// It implements every optional interface a database store does, so that
// a dispatcher over it works as over PostgreSQL and its tests need no
// database: Reserver (Append decides at once), Claimer, and Intents with
// transactions of its own (Begin, MemoryTx) for DispatchTx,
// ScheduleTimerTx, CancelTx and the relay. It is no FreshReader: Latest
// reads every record kept.
type Memory struct {
	processor string
	clock     clockwork.Clock

	mu      sync.Mutex
	history map[recKey][]Record // oldest first
	// claims are ClaimPending's, on an ID's latest record, until the
	// time given: a later record of the ID ends its claim.
	claims map[recKey]time.Time
	// intents are the committed intents no relay has finished, by ID.
	intents map[string]*memIntent
}

// NewMemory returns an empty in-memory outbox whose records name a new
// UUIDv7 as their processor. clock gives the times of records appended
// without one and Pending's "now"; nil means the real clock. Give it the
// clock the dispatcher uses.
func NewMemory(clock clockwork.Clock) *Memory {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Memory{processor: uuid.Must(uuid.NewV7()).String(), clock: clock, history: map[recKey][]Record{},
		claims: map[recKey]time.Time{}, intents: map[string]*memIntent{}}
}

// recKey identifies an ID within its table.
type recKey struct {
	table Table
	id    string
}

// ProcessorUUID returns the UUID the records are written under.
func (m *Memory) ProcessorUUID() string { return m.processor }

// Append keeps r at once, with the checks and defaults of Record.Prepare,
// and calls done (when not nil) before it returns. A record whose Version
// the ID already has (or passed) is refused under the mutex with a
// *VersionConflictError, returned at once.
func (m *Memory) Append(ctx context.Context, r Record, done func(error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := r.Prepare(m.processor, m.clock.Now()); err != nil {
		return err
	}
	if _, _, err := m.keep(r, false); err != nil {
		return err
	}
	if done != nil {
		done(nil)
	}
	return nil
}

// keep adds r, prepared, to its ID's history, unless it conflicts with
// the latest record (a *VersionConflictError), or, when first, unless the
// ID has any record: then it returns that latest record and kept false.
func (m *Memory) keep(r Record, first bool) (latest Record, kept bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.keepLocked(r, first)
}

// keepLocked is keep with m.mu held.
func (m *Memory) keepLocked(r Record, first bool) (latest Record, kept bool, err error) {
	k := recKey{r.Table, r.ID}
	h := m.history[k]
	n := len(h)
	switch {
	case n > 0 && first:
		return h[n-1], false, nil
	case n > 0 && r.Conflicts(&h[n-1]):
		return Record{}, false, &VersionConflictError{Table: r.Table, ID: r.ID, Version: r.Version, Current: h[n-1]}
	case h == nil:
		// Room for the outcome that follows a pending record, so the
		// usual history of an ID costs one allocation.
		h = make([]Record, 0, 2)
	}
	m.history[k] = append(h, follow(h, r))
	if len(m.claims) > 0 {
		delete(m.claims, k)
	}
	return Record{}, true, nil
}

var _ Reserver = (*Memory)(nil)

// Reserve implements Reserver: it keeps r, an ID's first record (Version
// 1), as Append does, unless the ID has any record; then it returns the
// ID's latest record and kept false.
func (m *Memory) Reserve(ctx context.Context, r Record) (Record, bool, error) {
	if r.Version != 1 {
		return Record{}, false, &RecordError{ID: r.ID, Field: "Version", Value: fmt.Sprint(r.Version), Rule: "must be 1: Reserve writes an ID's first record"}
	}
	if err := ctx.Err(); err != nil {
		return Record{}, false, err
	}
	if err := r.Prepare(m.processor, m.clock.Now()); err != nil {
		return Record{}, false, err
	}
	return m.keep(r, true)
}

// Flush does nothing: memory keeps every record as soon as it is
// appended.
func (m *Memory) Flush(ctx context.Context) error { return ctx.Err() }

var _ Checker = (*Memory)(nil)

// Check implements Checker: memory can always keep records, so it returns
// only ctx's error.
func (m *Memory) Check(ctx context.Context) error { return ctx.Err() }

// Latest returns the current state of an ID; ok is false when it was never
// recorded.
func (m *Memory) Latest(ctx context.Context, t Table, id string) (Record, bool, error) {
	if err := t.Validate(); err != nil {
		return Record{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return Record{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.history[recKey{t, id}]
	if len(h) == 0 {
		return Record{}, false, nil
	}
	return h[len(h)-1], true, nil
}

// Lookup returns the records matching q, sorted by table, ID and time, as
// Outbox.Lookup does.
func (m *Memory) Lookup(ctx context.Context, q Query) ([]Record, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	var out []Record
	for k, h := range m.history {
		if q.Table != "" && k.table != q.Table {
			continue
		}
		for i := range h {
			if q.Match(&h[i]) {
				out = append(out, h[i])
			}
		}
	}
	m.mu.Unlock()
	return Arrange(out, q.History), nil
}

// Pending returns the records of table t whose latest state is pending and
// was written more than olderThan ago, oldest first (then by ID), as
// Outbox.Pending does.
func (m *Memory) Pending(ctx context.Context, t Table, olderThan time.Duration) ([]Record, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cutoff := m.clock.Now().Add(-olderThan)
	m.mu.Lock()
	var out []Record
	for k, h := range m.history {
		if r := h[len(h)-1]; k.table == t && r.Status == StatusPending && !r.UpdatedAt.After(cutoff) {
			out = append(out, r)
		}
	}
	m.mu.Unlock()
	SortPending(out)
	return out, nil
}

var _ Claimer = (*Memory)(nil)

// ClaimPending implements Claimer: it returns, as Pending does, the
// records of table t whose latest state is pending and older than
// olderThan, leaving out those a claim holds and those whose ID has an
// intent waiting for a relay (which alone holds the request that creates
// the ID's task), and claims them until claimFor from now. A later record
// of an ID ends its claim. The deliveries table has nothing to recover:
// it returns none.
func (m *Memory) ClaimPending(ctx context.Context, t Table, olderThan, claimFor time.Duration) ([]Record, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if claimFor <= 0 {
		return nil, fmt.Errorf("outbox: claim pending: claimFor %s must be positive: a claim that has expired already shares nothing", claimFor)
	}
	if err := ctx.Err(); err != nil || t == TableDeliveries {
		return nil, err
	}
	now := m.clock.Now()
	cutoff := now.Add(-olderThan)
	m.mu.Lock()
	var out []Record
	for k, h := range m.history {
		r := h[len(h)-1]
		if k.table != t || r.Status != StatusPending || r.UpdatedAt.After(cutoff) {
			continue
		}
		if m.claims[k].After(now) {
			continue
		}
		if _, waiting := m.intents[k.id]; waiting {
			continue
		}
		m.claims[k] = now.Add(claimFor)
		out = append(out, r)
	}
	m.mu.Unlock()
	SortPending(out)
	return out, nil
}
