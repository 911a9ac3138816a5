package parquetbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// Compactions of one root (two machines, a cron overlapping a slow run)
// take a lease per partition before reading it, so no two of them fold
// the same files at once (a lease keeps work from being done twice; the
// unit's commit record, see commitDir, is what keeps a late compaction's
// rows from being counted twice). A lease is a small object
// <root>/_leases/<table>/<partition>.<seq>, created only if absent (O_EXCL
// on a disk; WriterOptions.IfNotExist on a bucket, a conditional create on
// GCS and S3), holding who took it and until when. The live lease is the
// one with the highest sequence number: to take over an expired one (its
// holder crashed), a compaction creates the next number, and after
// creating checks that no higher one appeared, so of two that raced, one
// backs off. A holder checks again just before it removes its inputs and
// gives up if its lease expired and was taken. Leases live outside the
// tables, where no engine reading the tables sees them.
const leaseDir = "_leases"

// maxLeaseBytes bounds what is read as a lease: a few hundred bytes of
// JSON in practice.
const maxLeaseBytes = 64 << 10

// leaseStore keeps small objects beside the tables: leases and manifests.
// Keys are relative to the root and use "/".
type leaseStore interface {
	// putNew writes data under key only if nothing is there; created is
	// false if something was.
	putNew(ctx context.Context, key string, data []byte) (created bool, err error)
	// put writes data under key, replacing what was there.
	put(ctx context.Context, key string, data []byte) error
	// get reads key, which must be a regular file (never a pipe or a
	// device) of at most max bytes; a larger one is errObjectTooLarge.
	get(ctx context.Context, key string, max int64) ([]byte, error)
	// keys lists the keys that start with prefix.
	keys(ctx context.Context, prefix string) ([]string, error)
	// del removes key; a missing key is not an error.
	del(ctx context.Context, key string) error
}

func (s localStore) leasePath(key string) string {
	return filepath.Join(s.root, filepath.FromSlash(key))
}

func (s localStore) putNew(_ context.Context, key string, data []byte) (bool, error) {
	p := s.leasePath(key)
	if err := os.MkdirAll(filepath.Dir(p), dirPerm); err != nil {
		return false, err
	}
	// The lease appears whole or not at all: written and synced under a
	// temporary name, then linked to its name, which fails if the name
	// exists. A process killed half-way leaves at most a temporary file,
	// never an empty lease that would look held for ever.
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-lease-*")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	if err := os.Link(tmp, p); err != nil {
		if errors.Is(err, os.ErrExist) {
			return false, nil
		}
		return false, err
	}
	return true, syncDir(filepath.Dir(p))
}

func (s localStore) put(_ context.Context, key string, data []byte) error {
	w, err := createAtomic(s.leasePath(key))
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.abort()
		return err
	}
	return w.commit()
}

// errObjectTooLarge is get's answer for an object over its bound.
var errObjectTooLarge = errors.New("object too large")

func tooLarge(size, max int64) error {
	return fmt.Errorf("%w: %d bytes (at most %d)", errObjectTooLarge, size, max)
}

func (s localStore) get(_ context.Context, key string, max int64) ([]byte, error) {
	f, st, err := openRegular(s.leasePath(key))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > max {
		return nil, tooLarge(st.Size(), max)
	}
	data := make([]byte, st.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, err
	}
	return data, nil
}

func (s localStore) keys(_ context.Context, prefix string) ([]string, error) {
	dir, base := path.Split(prefix)
	entries, err := os.ReadDir(s.leasePath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), base) && !isTemp(e.Name()) && e.Type().IsRegular() {
			out = append(out, dir+e.Name())
		}
	}
	return out, nil
}

func (s localStore) del(_ context.Context, key string) error {
	err := os.Remove(s.leasePath(key))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func (s *blobStore) putNew(ctx context.Context, key string, data []byte) (bool, error) {
	err := s.bucket.WriteAll(ctx, key, data, &blob.WriterOptions{IfNotExist: true, ContentType: "application/json"})
	switch gcerrors.Code(err) {
	case gcerrors.OK:
		return true, nil
	case gcerrors.FailedPrecondition, gcerrors.AlreadyExists:
		return false, nil
	}
	return false, err
}

func (s *blobStore) put(ctx context.Context, key string, data []byte) error {
	return s.bucket.WriteAll(ctx, key, data, &blob.WriterOptions{ContentType: "application/json"})
}

func (s *blobStore) get(ctx context.Context, key string, max int64) ([]byte, error) {
	r, err := s.bucket.NewReader(ctx, key, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("%w: %v", os.ErrNotExist, err)
	}
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if r.Size() > max {
		return nil, tooLarge(r.Size(), max)
	}
	return io.ReadAll(io.LimitReader(r, max))
}

func (s *blobStore) keys(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	err := s.each(ctx, prefix, func(obj *blob.ListObject) {
		if !obj.IsDir {
			out = append(out, obj.Key)
		}
	})
	return out, err
}

func (s *blobStore) del(ctx context.Context, key string) error {
	err := s.bucket.Delete(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil
	}
	return err
}

// leaseBody is what a lease object holds.
type leaseBody struct {
	Holder   string    `json:"holder"`
	Expires  time.Time `json:"expires"`
	Released bool      `json:"released,omitempty"`
}

// lease is a lease this process holds.
type lease struct {
	store  leaseStore
	prefix string // <leaseDir>/<table>/<partition>.
	seq    uint64
	holder string
	ttl    time.Duration
}

func (l *lease) key() string { return leaseKey(l.prefix, l.seq) }

func leaseKey(prefix string, seq uint64) string { return fmt.Sprintf("%s%012d", prefix, seq) }

// BusyError says that another compaction holds a partition's lease.
type BusyError struct {
	// Holder names the other compaction; Expires is when its lease ends
	// unless renewed.
	Holder  string
	Expires time.Time
}

// Error names the holder and the expiry.
func (e *BusyError) Error() string {
	return fmt.Sprintf("held by compaction %s until %s", e.Holder, e.Expires.Format(time.RFC3339))
}

// newestLease returns the highest sequence number under prefix and its
// body (ok false when there is none).
func newestLease(ctx context.Context, s leaseStore, prefix string) (seq uint64, body leaseBody, ok bool, err error) {
	keys, err := s.keys(ctx, prefix)
	if err != nil {
		return 0, body, false, err
	}
	var seqs []uint64
	for _, k := range keys {
		if n, err := strconv.ParseUint(strings.TrimPrefix(k, prefix), 10, 64); err == nil {
			seqs = append(seqs, n)
		}
	}
	if len(seqs) == 0 {
		return 0, body, false, nil
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] > seqs[j] })
	seq = seqs[0]
	data, err := s.get(ctx, leaseKey(prefix, seq), maxLeaseBytes)
	if errors.Is(err, os.ErrNotExist) {
		return seq, leaseBody{Released: true}, true, nil
	}
	if err != nil {
		return 0, body, false, err
	}
	if json.Unmarshal(data, &body) != nil {
		// Leases appear whole (a local one is linked into place once
		// written, a bucket's is one conditional write), so one that does
		// not parse was damaged: it holds nothing.
		body = leaseBody{Holder: "(unreadable lease)"}
	}
	return seq, body, true, nil
}

// acquireLease takes the lease of prefix for ttl, or returns a *BusyError.
func acquireLease(ctx context.Context, s leaseStore, prefix, holder string, now time.Time, ttl time.Duration) (*lease, error) {
	seq, body, ok, err := newestLease(ctx, s, prefix)
	if err != nil {
		return nil, err
	}
	if ok && !body.Released && body.Expires.After(now) {
		return nil, &BusyError{Holder: body.Holder, Expires: body.Expires}
	}
	next := uint64(0)
	if ok {
		next = seq + 1
	}
	l := &lease{store: s, prefix: prefix, seq: next, holder: holder, ttl: ttl}
	data, _ := json.Marshal(leaseBody{Holder: holder, Expires: now.Add(ttl)})
	created, err := s.putNew(ctx, l.key(), data)
	if err != nil {
		if created {
			_ = s.del(ctx, l.key())
		}
		return nil, err
	}
	if !created {
		_, body, _, _ := newestLease(ctx, s, prefix)
		return nil, &BusyError{Holder: body.Holder, Expires: body.Expires}
	}
	if top, body, _, err := newestLease(ctx, s, prefix); err != nil || top != next {
		_ = s.del(ctx, l.key())
		if err != nil {
			return nil, err
		}
		return nil, &BusyError{Holder: body.Holder, Expires: body.Expires}
	}
	// Older leases are history; keep the one before ours so that a
	// compaction acting on a stale listing fails to create its number.
	if keys, err := s.keys(ctx, prefix); err == nil {
		for _, k := range keys {
			if n, err := strconv.ParseUint(strings.TrimPrefix(k, prefix), 10, 64); err == nil && n+1 < next {
				_ = s.del(ctx, k)
			}
		}
	}
	return l, nil
}

// check reports an error unless l is still the live lease at now.
func (l *lease) check(ctx context.Context, now time.Time) error {
	seq, body, ok, err := newestLease(ctx, l.store, l.prefix)
	if err != nil {
		return err
	}
	if !ok || seq != l.seq || body.Holder != l.holder || body.Released {
		return &BusyError{Holder: body.Holder, Expires: body.Expires}
	}
	if !body.Expires.After(now) {
		return fmt.Errorf("lease %s expired at %s", l.key(), body.Expires.Format(time.RFC3339))
	}
	return nil
}

// renew extends l to now+ttl; it fails if l is no longer live.
func (l *lease) renew(ctx context.Context, now time.Time) error {
	if err := l.check(ctx, now); err != nil {
		return err
	}
	data, _ := json.Marshal(leaseBody{Holder: l.holder, Expires: now.Add(l.ttl)})
	return l.store.put(ctx, l.key(), data)
}

// release marks l released, so the next compaction need not wait for it
// to expire.
func (l *lease) release(ctx context.Context) {
	data, _ := json.Marshal(leaseBody{Holder: l.holder, Released: true})
	_ = l.store.put(ctx, l.key(), data)
}
