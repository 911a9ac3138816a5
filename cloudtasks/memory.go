package cloudtasks

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// memOutbox keeps the latest record per ID in memory. It is the outbox of a
// dispatcher configured without one: duplicates within the process are
// still answered locally, and Cloud Tasks' names cover the rest.
type memOutbox struct {
	processor string
	clock     clockwork.Clock
	mu        sync.Mutex
	latest    map[outbox.Table]map[string]outbox.Record
}

func newMemOutbox(processor string, clock clockwork.Clock) *memOutbox {
	return &memOutbox{processor: processor, clock: clock, latest: map[outbox.Table]map[string]outbox.Record{
		outbox.TableDispatch: {}, outbox.TableTimers: {},
	}}
}

func (m *memOutbox) ProcessorUUID() string { return m.processor }

func (m *memOutbox) Append(_ context.Context, r outbox.Record) error {
	r.ProcessorUUID = m.processor
	if r.UpdatedAt.IsZero() {
		r.UpdatedAt = m.clock.Now()
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = r.UpdatedAt
	}
	m.mu.Lock()
	m.latest[r.Table][r.ID] = r
	m.mu.Unlock()
	return nil
}

func (m *memOutbox) AppendAsync(ctx context.Context, r outbox.Record) error { return m.Append(ctx, r) }

func (m *memOutbox) Latest(_ context.Context, t outbox.Table, id string) (outbox.Record, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.latest[t][id]
	return r, ok, nil
}

func (m *memOutbox) Pending(_ context.Context, t outbox.Table, olderThan time.Duration) ([]outbox.Record, error) {
	cutoff := m.clock.Now().Add(-olderThan)
	m.mu.Lock()
	var out []outbox.Record
	for _, r := range m.latest[t] {
		if r.Status == outbox.StatusPending && !r.UpdatedAt.After(cutoff) {
			out = append(out, r)
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
