package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

var (
	_ Intents     = (*Memory)(nil)
	_ BulkIntents = (*Memory)(nil)
)

// ErrNoStatements is returned by a MemoryTx's Exec and Query: a Memory
// transaction holds records, not a database's statements. A store that
// records with SQL (package outbox/pgbox) given one fails with it.
var ErrNoStatements = errors.New("outbox: a Memory transaction runs no statements; a SQL store takes a transaction on its database")

// errTxDone is the error of a MemoryTx used after Commit or Rollback.
var errTxDone = errors.New("outbox: the Memory transaction is committed or rolled back already")

// MemoryTx is a transaction on a Memory, the outbox.Tx that a
// dispatcher's DispatchTx, ScheduleTimerTx and CancelTx take with a
// Memory outbox, as they take a database transaction with a SQL store.
// The records and intents appended in it are seen by LatestTx in it and
// by nothing else until Commit keeps them all at once; Rollback, or never
// committing, keeps none. Commit is optimistic: where a database makes a
// concurrent writer of the same version wait for the transaction, a
// Memory lets it write, and the transaction's Commit then fails with a
// *VersionConflictError and keeps nothing. A MemoryTx is safe for
// concurrent use.
type MemoryTx struct {
	m *Memory

	mu      sync.Mutex
	done    bool
	records []Record          // in the order appended
	intents map[string]Intent // by ID: a later one replaces an earlier
}

// memIntent is a committed intent and the claim a ClaimIntents holds on it.
type memIntent struct {
	Intent
	claimUntil time.Time // zero: unclaimed
}

// Begin starts a transaction on m.
func (m *Memory) Begin() *MemoryTx {
	return &MemoryTx{m: m, intents: map[string]Intent{}}
}

// Exec is outbox.Tx's statement, which a Memory transaction does not run:
// it returns ErrNoStatements.
func (tx *MemoryTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return 0, ErrNoStatements
}

// Query is outbox.Tx's query, which a Memory transaction does not run:
// it returns ErrNoStatements.
func (tx *MemoryTx) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	return nil, ErrNoStatements
}

// Commit keeps every record and intent appended in tx, or, when another
// writer has kept a record of one of their IDs with the same Version or a
// higher one since, none of them: it then returns that writer's
// *VersionConflictError. An intent replaces an unfinished intent of its
// ID and keeps the claim a relay holds on it.
func (tx *MemoryTx) Commit() error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.done {
		return errTxDone
	}
	tx.done = true
	m := tx.m
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := map[recKey][]Record{}
	for _, r := range tx.records {
		k := recKey{r.Table, r.ID}
		h, ok := kept[k]
		if !ok {
			h = slices.Clip(m.history[k])
		}
		if n := len(h); n > 0 && r.Conflicts(&h[n-1]) {
			return &VersionConflictError{Table: r.Table, ID: r.ID, Version: r.Version, Current: h[n-1]}
		}
		kept[k] = append(h, follow(h, r))
	}
	for k, h := range kept {
		m.history[k] = h
		delete(m.claims, k)
	}
	for id, in := range tx.intents {
		cur, ok := m.intents[id]
		if !ok {
			cur = &memIntent{}
			m.intents[id] = cur
		}
		cur.Intent = in
		if !in.Delete {
			// Its record's time, nudged past the ID's earlier one.
			h := kept[recKey{in.Table, in.ID}]
			cur.CreatedAt = h[len(h)-1].UpdatedAt
		}
	}
	return nil
}

// Rollback ends tx keeping nothing it appended.
func (tx *MemoryTx) Rollback() error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.done {
		return errTxDone
	}
	tx.done = true
	tx.records, tx.intents = nil, nil
	return nil
}

// follow returns r as kept after h, an ID's history: with an UpdatedAt
// past the last record's, as Append keeps it.
func follow(h []Record, r Record) Record {
	if n := len(h); n > 0 && !r.UpdatedAt.After(h[n-1].UpdatedAt) {
		r.UpdatedAt = h[n-1].UpdatedAt.Add(time.Microsecond)
	}
	return r
}

// open returns tx as a transaction of m that is still open, locked: the
// caller unlocks tx.mu.
func (m *Memory) open(tx Tx) (*MemoryTx, error) {
	mt, ok := tx.(*MemoryTx)
	switch {
	case !ok:
		return nil, fmt.Errorf("outbox: a Memory records only in its own transactions (Memory.Begin); given %T", tx)
	case mt.m != m:
		return nil, errors.New("outbox: the transaction is another Memory's")
	}
	mt.mu.Lock()
	if mt.done {
		mt.mu.Unlock()
		return nil, errTxDone
	}
	return mt, nil
}

// latestIn returns the newest record of an ID as tx sees it: its own
// last, or else the last kept. The caller holds tx.mu.
func (tx *MemoryTx) latestIn(t Table, id string) (Record, bool) {
	for i := len(tx.records) - 1; i >= 0; i-- {
		if r := tx.records[i]; r.Table == t && r.ID == id {
			return r, true
		}
	}
	tx.m.mu.Lock()
	defer tx.m.mu.Unlock()
	h := tx.m.history[recKey{t, id}]
	if len(h) == 0 {
		return Record{}, false
	}
	return h[len(h)-1], true
}

// LatestTx implements Intents: Latest as tx sees it, its own records
// first.
func (m *Memory) LatestTx(ctx context.Context, tx Tx, t Table, id string) (Record, bool, error) {
	if err := t.Validate(); err != nil {
		return Record{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return Record{}, false, err
	}
	mt, err := m.open(tx)
	if err != nil {
		return Record{}, false, err
	}
	defer mt.mu.Unlock()
	r, ok := mt.latestIn(t, id)
	return r, ok, nil
}

// AppendIntent implements Intents: inside tx it appends r (a pending
// record, conditional on its Version as Append is, checked against what
// tx sees) and in, its task, replacing an intent of the same ID appended
// in tx before. Both are kept if and only if tx commits.
func (m *Memory) AppendIntent(ctx context.Context, tx Tx, r Record, in Intent) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := r.Prepare(m.processor, m.clock.Now()); err != nil {
		return err
	}
	if err := in.Validate(&r); err != nil {
		return err
	}
	mt, err := m.open(tx)
	if err != nil {
		return err
	}
	defer mt.mu.Unlock()
	cur, ok := mt.latestIn(r.Table, r.ID)
	if ok && r.Conflicts(&cur) {
		return &VersionConflictError{Table: r.Table, ID: r.ID, Version: r.Version, Current: cur}
	}
	if ok {
		r = follow([]Record{cur}, r)
	}
	mt.records = append(mt.records, r)
	in.CreatedAt = r.UpdatedAt
	mt.intents[r.ID] = in
	return nil
}

var _ IntentReserver = (*Memory)(nil)

// ReserveIntent implements IntentReserver: AppendIntent of r and in
// unless tx sees a record of r's ID.
func (m *Memory) ReserveIntent(ctx context.Context, tx Tx, r Record, in Intent) (bool, error) {
	if r.Version != 1 {
		return false, &RecordError{ID: r.ID, Field: "Version", Value: fmt.Sprint(r.Version), Rule: "must be 1: ReserveIntent writes an ID's first record"}
	}
	if _, ok, err := m.LatestTx(ctx, tx, r.Table, r.ID); err != nil || ok {
		return false, err
	}
	err := m.AppendIntent(ctx, tx, r, in)
	if errors.Is(err, ErrVersionConflict) {
		return false, nil
	}
	return err == nil, err
}

// LatestManyTx implements BulkIntents: LatestTx of each of ids.
func (m *Memory) LatestManyTx(ctx context.Context, tx Tx, t Table, ids []string) (map[string]Record, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	mt, err := m.open(tx)
	if err != nil {
		return nil, err
	}
	defer mt.mu.Unlock()
	out := make(map[string]Record, len(ids))
	for _, id := range ids {
		if r, ok := mt.latestIn(t, id); ok {
			out[id] = r
		}
	}
	return out, nil
}

// AppendIntents implements BulkIntents: AppendIntent of each pair, each
// record checked against what tx sees, after PrepareIntents has checked
// them all.
func (m *Memory) AppendIntents(ctx context.Context, tx Tx, rs []Record, ins []Intent) ([]*VersionConflictError, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rs, err := PrepareIntents(rs, ins, m.processor, m.clock.Now())
	if err != nil {
		return nil, err
	}
	mt, err := m.open(tx)
	if err != nil {
		return nil, err
	}
	defer mt.mu.Unlock()
	var refused []*VersionConflictError
	for i, r := range rs {
		cur, ok := mt.latestIn(r.Table, r.ID)
		if ok && r.Conflicts(&cur) {
			refused = append(refused, &VersionConflictError{Table: r.Table, ID: r.ID, Version: r.Version, Current: cur})
			continue
		}
		if ok {
			r = follow([]Record{cur}, r)
		}
		mt.records = append(mt.records, r)
		in := ins[i]
		in.CreatedAt = r.UpdatedAt
		mt.intents[r.ID] = in
	}
	return refused, nil
}

// AppendCancel implements Intents: inside tx it appends in, a delete
// intent, replacing an intent of the same ID; it is kept, and replaces
// one no relay has finished, if and only if tx commits.
func (m *Memory) AppendCancel(ctx context.Context, tx Tx, in Intent) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := in.Validate(nil); err != nil { // a create needs its record: AppendIntent
		return err
	}
	mt, err := m.open(tx)
	if err != nil {
		return err
	}
	defer mt.mu.Unlock()
	in.Request, in.CreatedAt = []byte{}, m.clock.Now().UTC().Truncate(time.Microsecond)
	mt.intents[in.ID] = in
	return nil
}

// HasIntent implements Intents: whether a committed intent of id waits
// for a relay.
func (m *Memory) HasIntent(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.intents[id]
	return ok, nil
}

// ClaimIntents implements Intents: it returns up to max committed
// intents of queues that no claim holds (or whose claim has expired),
// oldest first, then by ID, and claims them until claimFor from now.
func (m *Memory) ClaimIntents(ctx context.Context, queues []string, max int, claimFor time.Duration) ([]Intent, error) {
	switch {
	case max < 1:
		return nil, fmt.Errorf("outbox: claim intents: max %d must be 1 or more", max)
	case claimFor <= 0:
		return nil, fmt.Errorf("outbox: claim intents: claimFor %s must be positive: a claim that has expired already shares nothing", claimFor)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var free []*memIntent
	for _, in := range m.intents {
		if slices.Contains(queues, in.Queue) && !in.claimUntil.After(now) {
			free = append(free, in)
		}
	}
	slices.SortFunc(free, func(a, b *memIntent) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if len(free) == 0 {
		return nil, nil
	}
	free = free[:min(len(free), max)]
	out := make([]Intent, len(free))
	for i, in := range free {
		in.claimUntil = now.Add(claimFor)
		out[i] = in.Intent
	}
	return out, nil
}

// DropIntent implements Intents: it removes in unless a later transaction
// replaced it with another version or a cancel; it then ends the claim on
// the replacement, which the next ClaimIntents returns.
func (m *Memory) DropIntent(ctx context.Context, in Intent) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropLocked(in)
	return nil
}

// dropLocked is DropIntent with m.mu held.
func (m *Memory) dropLocked(in Intent) {
	cur, ok := m.intents[in.ID]
	switch {
	case !ok:
	case cur.Version == in.Version && cur.Delete == in.Delete:
		delete(m.intents, in.ID)
	default:
		cur.claimUntil = time.Time{}
	}
}

var _ OutcomeAppender = (*Memory)(nil)

// AppendOutcome implements OutcomeAppender: it appends r as Append does
// and drops in as DropIntent does, under one hold of the mutex, so no
// reader sees one without the other.
func (m *Memory) AppendOutcome(ctx context.Context, r Record, in Intent) error {
	if err := CheckOutcome(&r, &in); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := r.Prepare(m.processor, m.clock.Now()); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _, err := m.keepLocked(r, false)
	if err != nil && !errors.Is(err, ErrVersionConflict) {
		return err
	}
	m.dropLocked(in)
	return err
}

// ReleaseIntents implements Intents: the claims on ins end, so the next
// ClaimIntents returns them. An intent dropped or replaced meanwhile is
// left as it is.
func (m *Memory) ReleaseIntents(ctx context.Context, ins []Intent) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, in := range ins {
		if cur, ok := m.intents[in.ID]; ok && cur.Version == in.Version && cur.Delete == in.Delete {
			cur.claimUntil = time.Time{}
		}
	}
	return nil
}
