package worker

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"
)

// Work is a key's work as an inbox runs it: tx is the transaction its
// writes belong in, nil for an inbox without a database.
type Work func(ctx context.Context, tx *sql.Tx) error

// Inbox makes each key's work take effect once, however often the key is
// delivered.
type Inbox interface {
	// Process runs work for key unless the key is finished, and marks it
	// finished when work returns nil (OutcomeDone) or a permanent error
	// (OutcomeFailed, the work's writes undone). A finished key is not run
	// again: OutcomeDuplicate. Any other error from work undoes its writes,
	// leaves the key unfinished and is returned. Process waits at most wait
	// while another delivery holds the key, then returns ErrBusy.
	Process(ctx context.Context, key string, wait time.Duration, work Work) (Outcome, error)
}

// MinRetention is the shortest time an inbox keeps a finished key: Cloud
// Tasks keeps a task at most 31 days, so until then the key can still be
// delivered. Cleanup refuses a shorter age.
const MinRetention = 31 * 24 * time.Hour

func checkRetention(olderThan time.Duration) error {
	if olderThan < MinRetention {
		return fmt.Errorf("worker: cleanup age %s is below MinRetention (744h0m0s, 31 days): a task can still deliver its key until then", olderThan)
	}
	return nil
}

// MemoryInbox is an Inbox in this process's memory, for tests, demos and
// single-process tools. It guarantees nothing across processes or
// restarts: another process, or this one restarted, runs a key again, and
// a crash between the work and the mark loses the mark. The work gets no
// transaction (Delivery.Tx is nil).
type MemoryInbox struct {
	locks keyLocks
	now   func() time.Time

	mu       sync.Mutex
	finished map[string]memoryEntry
}

type memoryEntry struct {
	outcome Outcome
	at      time.Time
}

// NewMemoryInbox returns an empty in-memory inbox.
func NewMemoryInbox() *MemoryInbox {
	return &MemoryInbox{now: time.Now, finished: make(map[string]memoryEntry)}
}

// Process implements Inbox, one key at a time.
func (m *MemoryInbox) Process(ctx context.Context, key string, wait time.Duration, work Work) (Outcome, error) {
	unlock, err := m.locks.lock(ctx, key, wait)
	if err != nil {
		return "", err
	}
	defer unlock()
	m.mu.Lock()
	_, done := m.finished[key]
	m.mu.Unlock()
	if done {
		return OutcomeDuplicate, nil
	}
	outcome := OutcomeDone
	if err := work(ctx, nil); err != nil {
		if !IsPermanent(err) {
			return "", err
		}
		outcome = OutcomeFailed
	}
	m.mu.Lock()
	m.finished[key] = memoryEntry{outcome: outcome, at: m.now()}
	m.mu.Unlock()
	return outcome, nil
}

// Finished returns the outcome recorded for key (OutcomeDone or
// OutcomeFailed) and whether there is one.
func (m *MemoryInbox) Finished(key string) (Outcome, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.finished[key]
	return e.outcome, ok
}

// Len returns how many finished keys the inbox holds.
func (m *MemoryInbox) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.finished)
}

// Cleanup forgets the keys finished more than olderThan ago, which must be
// at least MinRetention, and returns how many it forgot.
func (m *MemoryInbox) Cleanup(_ context.Context, olderThan time.Duration) (int64, error) {
	if err := checkRetention(olderThan); err != nil {
		return 0, err
	}
	cutoff := m.now().Add(-olderThan)
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for k, e := range m.finished {
		if e.at.Before(cutoff) {
			delete(m.finished, k)
			n++
		}
	}
	return n, nil
}

// keyLocks serialises the holders of each key within the process. Waiting
// is bounded, so a stuck holder turns later deliveries into retries rather
// than a pile of blocked requests.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	held chan struct{} // one slot: full while held
	refs int           // holders and waiters; the entry goes at zero
}

// lock takes key's lock, waiting at most wait, and returns its release.
func (k *keyLocks) lock(ctx context.Context, key string, wait time.Duration) (func(), error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = make(map[string]*keyLock)
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{held: make(chan struct{}, 1)}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()

	release := func() {
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.held <- struct{}{}:
		return func() { <-l.held; release() }, nil
	default:
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case l.held <- struct{}{}:
		return func() { <-l.held; release() }, nil
	case <-timer.C:
		release()
		return nil, ErrBusy
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
