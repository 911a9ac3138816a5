package outbox

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Memory is an outbox held in memory, for a dispatcher configured without
// files and for tests. It follows the same rules as Outbox (checked by the
// conformance suite in package outboxtest): the same validation and
// refusal of foreign records, microsecond UTC times, UpdatedAt strictly
// increasing per ID, Pending oldest first. It keeps every state of every
// ID until it is dropped, and forgets everything when it is. Its methods
// are safe for concurrent use.
type Memory struct {
	processor string
	clock     clockwork.Clock

	mu      sync.Mutex
	history map[recKey][]Record // oldest first
}

// NewMemory returns an empty in-memory outbox whose records name
// processorUUID. A nil clock is the real clock.
func NewMemory(processorUUID string, clock clockwork.Clock) *Memory {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Memory{processor: processorUUID, clock: clock, history: map[recKey][]Record{}}
}

// ProcessorUUID returns the UUID the records are written under.
func (m *Memory) ProcessorUUID() string { return m.processor }

// Append records r, with the defaults and checks of Outbox.Append.
func (m *Memory) Append(ctx context.Context, r Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := r.prepare(m.processor, m.clock); err != nil {
		return err
	}
	k := recKey{r.Table, r.ID}
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.history[k]
	if n := len(h); n > 0 && !r.UpdatedAt.After(h[n-1].UpdatedAt) {
		r.UpdatedAt = h[n-1].UpdatedAt.Add(time.Microsecond)
	}
	m.history[k] = append(h, r)
	return nil
}

// AppendAsync is Append: memory has nothing to wait for.
func (m *Memory) AppendAsync(ctx context.Context, r Record) error { return m.Append(ctx, r) }

// AppendThen is Append followed by then(nil): memory has nothing to wait
// for. An error is returned instead, and then is not called.
func (m *Memory) AppendThen(ctx context.Context, r Record, then func(error)) error {
	if err := m.Append(ctx, r); err != nil {
		return err
	}
	then(nil)
	return nil
}

// StartAppend is Append, answered by a Commit already done: memory has
// nothing to wait for.
func (m *Memory) StartAppend(ctx context.Context, r Record) (Commit, error) {
	return Commit{}, m.Append(ctx, r)
}

// Latest returns the current state of an ID; ok is false when it was never
// recorded.
func (m *Memory) Latest(ctx context.Context, t Table, id string) (Record, bool, error) {
	if err := t.validate(); err != nil {
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
	if err := q.validate(); err != nil {
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
			if q.match(&h[i]) {
				out = append(out, h[i])
			}
		}
	}
	m.mu.Unlock()
	return arrange(out, q.History), nil
}

// Pending returns the records of table t whose latest state is pending and
// was written more than olderThan ago, oldest first (then by ID), as
// Outbox.Pending does.
func (m *Memory) Pending(ctx context.Context, t Table, olderThan time.Duration) ([]Record, error) {
	if err := t.validate(); err != nil {
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
	sortPending(out)
	return out, nil
}

// sortPending puts records in the order Pending returns them: oldest
// first, then by ID.
func sortPending(recs []Record) {
	sort.Slice(recs, func(i, j int) bool {
		if !recs[i].UpdatedAt.Equal(recs[j].UpdatedAt) {
			return recs[i].UpdatedAt.Before(recs[j].UpdatedAt)
		}
		return recs[i].ID < recs[j].ID
	})
}
