package outbox

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
)

// Memory is an Outbox held in one process's memory, for a dispatcher
// that needs no record past its process and for tests. It follows the
// same rules as every Outbox (checked by the conformance suite in package
// outboxtest): the same validation and
// refusal of foreign records, microsecond UTC times, UpdatedAt strictly
// increasing per ID, conditional append by Version, Pending oldest first. It keeps every state of every
// ID until it is dropped, and forgets everything when it is. Its methods
// are safe for concurrent use.
type Memory struct {
	processor string
	clock     clockwork.Clock

	mu      sync.Mutex
	history map[recKey][]Record // oldest first
}

// NewMemory returns an empty in-memory outbox whose records name a new
// UUIDv7 as their processor. clock gives the times of records appended
// without one and Pending's "now"; nil means the real clock. Give it the
// clock the dispatcher uses.
func NewMemory(clock clockwork.Clock) *Memory {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Memory{processor: uuid.Must(uuid.NewV7()).String(), clock: clock, history: map[recKey][]Record{}}
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
	k := recKey{r.Table, r.ID}
	m.mu.Lock()
	h := m.history[k]
	if n := len(h); n > 0 && r.Conflicts(&h[n-1]) {
		m.mu.Unlock()
		return &VersionConflictError{Table: r.Table, ID: r.ID, Version: r.Version, Current: h[n-1]}
	}
	if n := len(h); n > 0 && !r.UpdatedAt.After(h[n-1].UpdatedAt) {
		r.UpdatedAt = h[n-1].UpdatedAt.Add(time.Microsecond)
	}
	if h == nil {
		// Room for the outcome that follows a pending record, so the
		// usual history of an ID costs one allocation.
		h = make([]Record, 0, 2)
	}
	m.history[k] = append(h, r)
	m.mu.Unlock()
	if done != nil {
		done(nil)
	}
	return nil
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
