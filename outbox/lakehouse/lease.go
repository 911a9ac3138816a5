package lakehouse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// ErrBusy matches a *BusyError: another publisher holds a table's lease.
var ErrBusy = errors.New("lakehouse: another publisher holds the table")

// ErrLeaseLost is returned when a publisher finds, before a commit or
// after one it could not verify, that its lease expired or was taken:
// it commits nothing more, and the new holder publishes.
var ErrLeaseLost = errors.New("lakehouse: publication lease lost")

// BusyError says that another publisher holds a table's lease.
type BusyError struct {
	// Table is the table; Holder names the other publisher and Expires
	// says when its lease ends unless renewed.
	Table   outbox.Table
	Holder  string
	Expires time.Time
}

// Error names the table, the holder and the expiry.
func (e *BusyError) Error() string {
	return fmt.Sprintf("lakehouse: table %s is being published by %s until %s", e.Table, e.Holder, e.Expires.UTC().Format(time.RFC3339))
}

// Unwrap makes a BusyError match ErrBusy.
func (e *BusyError) Unwrap() error { return ErrBusy }

// A lease on a table's publication is a numbered object,
// _iceberg/leases/<table>.<seq>, created only if absent: the highest
// number holds, while its expiry (by the taker's clock) is ahead. A
// publisher takes over an expired or released lease by creating the next
// number, so one that was paused past its lease finds a higher number and
// steps back. Release keeps the object with no expiry rather than
// removing it, so numbers never go back.
type lease struct {
	objs   objects
	table  outbox.Table
	holder string
	seq    uint64
	clock  clockwork.Clock
	ttl    time.Duration
}

type leaseRecord struct {
	Holder  string    `json:"holder"`
	Expires time.Time `json:"expires"`
}

func leasePrefix(t outbox.Table) string { return metaDir + "/leases/" + string(t) + "." }

func leaseKey(t outbox.Table, seq uint64) string {
	return fmt.Sprintf("%s%020d", leasePrefix(t), seq)
}

// latestLease returns the highest lease number of a table (0: none).
func latestLease(ctx context.Context, objs objects, t outbox.Table) (uint64, []uint64, error) {
	keys, err := objs.list(ctx, leasePrefix(t))
	if err != nil {
		return 0, nil, err
	}
	var latest uint64
	var all []uint64
	for _, k := range keys {
		n, err := strconv.ParseUint(strings.TrimPrefix(k, leasePrefix(t)), 10, 64)
		if err != nil {
			continue
		}
		all = append(all, n)
		latest = max(latest, n)
	}
	return latest, all, nil
}

// takeLease takes table t's lease for holder, or returns a *BusyError.
func takeLease(ctx context.Context, objs objects, t outbox.Table, holder string, clock clockwork.Clock, ttl time.Duration) (*lease, error) {
	latest, all, err := latestLease(ctx, objs, t)
	if err != nil {
		return nil, fmt.Errorf("lakehouse: list leases of %s: %w", t, err)
	}
	now := clock.Now()
	if latest > 0 {
		data, err := objs.get(ctx, leaseKey(t, latest))
		if err != nil {
			return nil, fmt.Errorf("lakehouse: read lease of %s: %w", t, err)
		}
		var r leaseRecord
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("lakehouse: lease %s: %w", leaseKey(t, latest), err)
		}
		if now.Before(r.Expires) {
			return nil, &BusyError{Table: t, Holder: r.Holder, Expires: r.Expires}
		}
	}
	l := &lease{objs: objs, table: t, holder: holder, seq: latest + 1, clock: clock, ttl: ttl}
	data, _ := json.Marshal(leaseRecord{Holder: holder, Expires: now.Add(ttl)})
	if err := objs.create(ctx, leaseKey(t, l.seq), data); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, &BusyError{Table: t, Holder: "another publisher", Expires: now.Add(ttl)}
		}
		return nil, fmt.Errorf("lakehouse: take lease of %s: %w", t, err)
	}
	for _, n := range all {
		if n < latest {
			_ = objs.remove(ctx, leaseKey(t, n))
		}
	}
	return l, nil
}

// renew checks that the lease is still held (no higher number, not
// expired by this clock) and extends it; else ErrLeaseLost.
func (l *lease) renew(ctx context.Context, expires time.Time) error {
	latest, _, err := latestLease(ctx, l.objs, l.table)
	if err != nil {
		return fmt.Errorf("lakehouse: list leases of %s: %w", l.table, err)
	}
	if latest != l.seq {
		return fmt.Errorf("%w: table %s: lease %d was taken over (now %d)", ErrLeaseLost, l.table, l.seq, latest)
	}
	data, err := l.objs.get(ctx, leaseKey(l.table, l.seq))
	if err != nil {
		return fmt.Errorf("lakehouse: read lease of %s: %w", l.table, err)
	}
	var r leaseRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("lakehouse: lease %s: %w", leaseKey(l.table, l.seq), err)
	}
	if r.Holder != l.holder || !l.clock.Now().Before(r.Expires) {
		return fmt.Errorf("%w: table %s: lease %d expired at %s", ErrLeaseLost, l.table, l.seq, r.Expires.UTC().Format(time.RFC3339))
	}
	data, _ = json.Marshal(leaseRecord{Holder: l.holder, Expires: expires})
	return l.objs.put(ctx, leaseKey(l.table, l.seq), data)
}

// check renews the lease for another TTL.
func (l *lease) check(ctx context.Context) error { return l.renew(ctx, l.clock.Now().Add(l.ttl)) }

// release ends the lease at once, if it is still held.
func (l *lease) release(ctx context.Context) error {
	err := l.renew(ctx, time.Time{})
	if errors.Is(err, ErrLeaseLost) {
		return nil
	}
	return err
}
