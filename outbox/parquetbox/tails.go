package parquetbox

import (
	"errors"
	"os"
	"sync"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/jonboulle/clockwork"
)

// walTails follows the log segments of other processors, reading only
// what was appended since the last look. A frame still being written is
// not an error: it is read once complete. A look lists the log directory
// only when its stamp moved (a segment came or went, see stamp.go);
// otherwise it stats the segments it follows and reads what they gained.
// Records are indexed by ID, so a read of one ID does not scan the
// others' logs.
type walTails struct {
	dir     string
	self    string
	refresh time.Duration
	clock   clockwork.Clock

	mu       sync.Mutex
	segs     map[string]*tail
	lookedAt time.Time
	// listed are the stamps of the log directory at its last listing.
	listed *dirStamps
	// byID indexes the followed records by table and ID.
	byID map[recKey][]tailRef
}

type tail struct {
	// f is the segment, held open (where holdOpen) so that a look stats
	// it without walking its path, until it leaves the directory.
	f    *os.File
	off  int64
	size int64
	recs []outbox.Record
}

// stat returns the size of the segment at path, opening it first where
// segments are held open.
func (t *tail) stat(path string) (int64, error) {
	if !holdOpen {
		st, err := os.Stat(path)
		if err != nil {
			return 0, err
		}
		return st.Size(), nil
	}
	if t.f == nil {
		f, _, err := openRegular(path)
		if err != nil {
			return 0, err
		}
		t.f = f
	}
	st, err := t.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// read reads the frames after t.off of the segment, size bytes long.
func (t *tail) read(path string, size int64) ([]outbox.Record, int64, error) {
	if t.f == nil {
		return readFrames(path, t.off)
	}
	return readFramesOf(t.f, path, size, t.off)
}

func (t *tail) close() {
	if t.f != nil {
		t.f.Close()
	}
}

// tailRef is one record of a followed segment.
type tailRef struct {
	t *tail
	i int
}

func newWALTails(dir, self string, refresh time.Duration, clock clockwork.Clock) *walTails {
	return &walTails{dir: dir, self: self, refresh: refresh, clock: clock, segs: map[string]*tail{}, byID: map[recKey][]tailRef{}}
}

// records refreshes every followed segment and returns all their records
// (the slices must not be modified).
func (w *walTails) records() ([][]outbox.Record, error) {
	if err := w.look(); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([][]outbox.Record, 0, len(w.segs))
	for _, t := range w.segs {
		if len(t.recs) > 0 {
			out = append(out, t.recs[:len(t.recs):len(t.recs)])
		}
	}
	return out, nil
}

// of refreshes every followed segment and returns the records of one ID,
// as copies.
func (w *walTails) of(t outbox.Table, id string) ([]outbox.Record, error) {
	if err := w.look(); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	refs := w.byID[recKey{t, id}]
	if len(refs) == 0 {
		return nil, nil
	}
	out := make([]outbox.Record, len(refs))
	for i, r := range refs {
		out[i] = r.t.recs[r.i]
	}
	return out, nil
}

// look brings the followed segments up to date, unless the last look is
// within the refresh interval.
func (w *walTails) look() error {
	w.mu.Lock()
	if w.refresh > 0 && !w.lookedAt.IsZero() && w.clock.Since(w.lookedAt) < w.refresh {
		w.mu.Unlock()
		return nil
	}
	listed := w.listed
	w.mu.Unlock()
	lookedAt := w.clock.Now()
	var paths []string
	relisted := !listed.unchanged()
	if relisted {
		listed = newDirStamps()
		listed.add(w.dir)
		segs, err := listSegments(w.dir)
		if err != nil {
			listed.close()
			return err
		}
		for _, s := range segs {
			if s.Processor != w.self {
				paths = append(paths, s.Path)
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !relisted {
		// The directory holds the same segments: those followed.
		for p := range w.segs {
			paths = append(paths, p)
		}
	}
	if relisted {
		w.listed.close()
		w.listed = listed
	}
	w.lookedAt = lookedAt
	seen := make(map[string]bool, len(paths))
	dropped := false
	for _, p := range paths {
		seen[p] = true
		t, ok := w.segs[p]
		if !ok {
			t = &tail{}
			w.segs[p] = t
		}
		size, err := t.stat(p)
		if err != nil {
			t.close()
			delete(w.segs, p)
			dropped = true
			continue
		}
		if size != t.size {
			recs, end, err := t.read(p, size)
			var te *tailError
			if err != nil && !errors.As(err, &te) {
				continue // vanished or not a segment: nothing to serve
			}
			for i := range recs {
				w.byID[recKey{recs[i].Table, recs[i].ID}] = append(w.byID[recKey{recs[i].Table, recs[i].ID}], tailRef{t, len(t.recs) + i})
			}
			t.recs = append(t.recs, recs...)
			t.off = end
			t.size = size
		}
	}
	for p, t := range w.segs {
		if !seen[p] {
			t.close()
			delete(w.segs, p)
			dropped = true
		}
	}
	if dropped {
		w.reindexLocked()
	}
	return nil
}

// reindexLocked builds the index again from the followed segments, after
// some were dropped (converted to Parquet, or gone).
func (w *walTails) reindexLocked() {
	clear(w.byID)
	for _, t := range w.segs {
		for i := range t.recs {
			k := recKey{t.recs[i].Table, t.recs[i].ID}
			w.byID[k] = append(w.byID[k], tailRef{t, i})
		}
	}
}

// expire makes the next look at the logs happen whatever the refresh
// interval allows; it still skips the listing when the log directory's
// stamp did not move.
func (w *walTails) expire() {
	w.mu.Lock()
	w.lookedAt = time.Time{}
	w.mu.Unlock()
}

// close releases the held segments and directory.
func (w *walTails) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, t := range w.segs {
		t.close()
		delete(w.segs, p)
	}
	clear(w.byID)
	w.listed.close()
	w.listed = nil
}
