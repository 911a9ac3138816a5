package parquetbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/jonboulle/clockwork"
	"gocloud.dev/gcerrors"
)

// fileSet keeps the Parquet files of one table in step with the
// directory: each read lists the directory (at most once per refresh
// interval), opens new files, and forgets removed ones. Files that fail to
// open are reported once (per size and modification time) and skipped.
// Between reads it keeps at most maxOpen files open, and their footers and
// bloom filters within cacheBytes, closing the least recently used: a
// dispatcher's handles and memory do not grow with the outbox. A read
// reopens what was closed.
type fileSet struct {
	store      tableStore
	table      outbox.Table
	log        *slog.Logger
	cacheBloom bool
	// refresh is how long a listing is reused (0: list on every read).
	refresh time.Duration
	clock   clockwork.Clock

	maxOpen    int
	cacheBytes int64

	mu     sync.Mutex
	listed []storeEntry // the last listing
	files  map[string]*openFile
	bad    map[string]badFile
	// checked are files LiveFiles found readable, in the version it
	// opened.
	checked map[string]fileVersion
	// odd are the entries of the last listing outside the layout.
	odd      []*FileError
	listedAt time.Time
	stale    bool
	// expired makes the next read look again, whatever refresh allows;
	// unlike stale, the look may find the stamps unchanged and keep the
	// listing.
	expired bool
	// stamps are those of the directories the last listing read (nil on
	// a bucket): while they hold, the listing, the commits and the
	// manifest it read are those of now.
	stamps *dirStamps
	// manifest is the table's manifest as of the last listing (nil: none
	// usable); badManifest is the last error reading it, logged once.
	manifest    manifestView
	badManifest string
	// commits are the units' newest commits as of the last listing,
	// which decide what of a unit is read (see commitDir).
	commits *commitView
	// hidden are the listed files the commits hide (orphans, consumed
	// inputs not removed yet), for compaction to remove.
	hidden []storeEntry
	uses   uint64 // counts acquisitions, for least-recently-used order
}

type openFile struct {
	*pqFile
	modTime time.Time
	refs    int
	gone    bool
	used    uint64
}

type badFile struct {
	size    int64
	modTime time.Time
	err     *FileError
}

func newFileSet(store tableStore, t outbox.Table, log *slog.Logger, cacheBloom bool, refresh time.Duration, clock clockwork.Clock, maxOpen int, cacheBytes int64) *fileSet {
	return &fileSet{store: store, table: t, log: log, cacheBloom: cacheBloom, refresh: refresh, clock: clock,
		maxOpen: maxOpen, cacheBytes: cacheBytes, files: map[string]*openFile{}, bad: map[string]badFile{}, checked: map[string]fileVersion{}}
}

// invalidate makes the next read list the files again (after this process
// wrote or removed some).
func (fs *fileSet) invalidate() {
	fs.mu.Lock()
	fs.stale = true
	fs.mu.Unlock()
}

// expire makes the next read look at the files again, whatever the
// refresh interval allows: on a directory a stat of each directory the
// last listing read and of the table's commits, which lists again only
// if one of them changed.
func (fs *fileSet) expire() {
	fs.mu.Lock()
	fs.expired = true
	fs.mu.Unlock()
}

// isDataFile reports whether a directory entry is a table file: hidden
// names are temporaries of writers in progress.
func isDataFile(name string) bool {
	return strings.HasSuffix(name, ".parquet") && !strings.HasPrefix(name, ".")
}

// acquire refreshes the set and returns the current files, each held until
// release is called.
func (fs *fileSet) acquire(ctx context.Context) ([]*openFile, error) {
	return fs.acquireWhere(ctx, nil)
}

// acquireWhere is acquire for the listed files whose names keep admits
// (all of them when keep is nil): a compaction of one unit opens that
// unit's files alone, so a table of many thousand files (a busy day before
// its first compaction) never holds a descriptor for each.
func (fs *fileSet) acquireWhere(ctx context.Context, keep func(name string) bool) ([]*openFile, error) {
	if err := fs.relist(ctx, nil); err != nil {
		return nil, err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var want map[string]*admission
	if keep != nil {
		want = map[string]*admission{}
		for _, e := range fs.listed {
			if keep(e.name) {
				want[e.name] = nil
			}
		}
	}
	fs.openListedLocked(ctx, want)
	return fs.holdLocked(want), nil
}

// acquireFor is acquire for a lookup of value in column fld (the ID or
// cloud_task_id): files the table's manifest rules out are neither opened
// nor returned, and the admission of each file returned says which of its
// row groups may hold value (nil: all). When the files are listed anew,
// the manifest's candidates are probed and opened while the listing is
// under way (see prefetch), and kept only where the listing shows the
// version the manifest describes.
func (fs *fileSet) acquireFor(ctx context.Context, fld field, value string) ([]*openFile, map[string]*admission, error) {
	var pre prefetched
	err := fs.relist(ctx, func(m manifestView) { pre = fs.prefetch(ctx, m, fld, value) })
	if err != nil {
		pre.close()
		return nil, nil, err
	}
	fs.mu.Lock()
	listed, m := inBucket(fs.listed, fld, value), fs.manifest
	if m == nil {
		defer fs.mu.Unlock()
		pre.close()
		want := make(map[string]*admission, len(listed))
		for _, e := range listed {
			want[e.name] = nil
		}
		fs.openListedLocked(ctx, want)
		return fs.holdLocked(want), nil, nil
	}
	open := make(map[string]bool, len(fs.files))
	for _, e := range listed {
		if f, ok := fs.files[e.name]; ok && f.size == e.size && f.modTime.Equal(e.modTime) {
			open[e.name] = true
		}
	}
	fs.mu.Unlock()
	want := fs.probeManifest(ctx, listed, m, open, fld, value, pre)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.adoptLocked(pre, want)
	fs.openListedLocked(ctx, want)
	return fs.holdLocked(want), want, nil
}

// inBucket returns the listed files that may hold value in column fld:
// for an ID, only its bucket's (and files without a bucket), so a lookup
// by ID opens one unit per day. A cloud_task_id does not tell its task,
// so its lookups rely on the manifest's bloom filters instead.
func inBucket(listed []storeEntry, fld field, value string) []storeEntry {
	if fld != fieldID {
		return listed
	}
	out := make([]storeEntry, 0, len(listed))
	for _, e := range listed {
		if mayHold(e.name, value) {
			out = append(out, e)
		}
	}
	return out
}

// relist lists the files again unless the last listing is recent enough
// (or, for a read that expired it, its stamps show that none of the
// directories it read has changed), forgets files no longer listed, and
// reloads the table's manifest. When
// it lists and a manifest is there, early (unless nil) is called with it
// while the listing is still under way.
func (fs *fileSet) relist(ctx context.Context, early func(manifestView)) error {
	fs.mu.Lock()
	if !fs.stale && !fs.expired && fs.refresh > 0 && !fs.listedAt.IsZero() && fs.clock.Since(fs.listedAt) < fs.refresh {
		fs.mu.Unlock()
		return nil
	}
	stamps := fs.stamps
	if fs.stale || !fs.expired {
		stamps = nil
	}
	fs.mu.Unlock()
	if stamps.unchanged() && fs.keepListing(stamps) {
		return nil
	}
	listedAt := fs.clock.Now()
	fs.mu.Lock()
	prev := fs.commits
	fs.mu.Unlock()
	l, err := fs.list(ctx, prev, early)
	if err != nil {
		return err
	}
	entries, odd := splitOdd(l.entries)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.reportOddLocked(odd)
	fs.listedAt, fs.stale, fs.expired, fs.listed, fs.manifest = listedAt, false, false, entries, l.manifest
	fs.stamps.close()
	fs.stamps = l.stamps
	fs.commits, fs.hidden = l.commits, l.hidden
	seen := map[string]bool{}
	for _, e := range entries {
		seen[e.name] = true
	}
	for name, f := range fs.files {
		if !seen[name] {
			fs.dropLocked(name, f)
		}
	}
	for name := range fs.bad {
		if !seen[name] {
			delete(fs.bad, name)
		}
	}
	return nil
}

// listing is what one listing of a table read.
type listing struct {
	entries, hidden []storeEntry
	commits         *commitView
	manifest        manifestView
	// stamps are those of the directories read (stamp.go); nil on a
	// bucket, or when the commits moved during the listing.
	stamps *dirStamps
}

// list reads the table's commits, files and manifest, as relist says.
func (fs *fileSet) list(ctx context.Context, prev *commitView, early func(manifestView)) (l listing, err error) {
	stamped, _ := fs.store.(stampedStore)
	for try := 0; ; try++ {
		var stamps, listStamps *dirStamps
		if stamped != nil && try == 0 {
			// Each directory is stamped before it is read, so a change
			// after the read moves its stamp.
			stamps = newDirStamps()
			for _, dir := range stamped.stampDirs(fs.table) {
				stamps.add(dir)
			}
			listStamps = &dirStamps{at: stamps.at, trusted: true}
		}
		entries, before, after, err := fs.listTry(ctx, prev, stamped, listStamps, try == 0, &l.manifest, early)
		if err != nil {
			stamps.close()
			listStamps.close()
			return listing{}, err
		}
		if sameCommits(before, after) || try == 2 {
			// Still moving after three tries: a file either commit
			// shows is read, so nothing is hidden (a duplicate folds).
			l.entries, l.hidden = visibleEntries(entries, before, after)
			l.commits = after
			if stamps != nil {
				stamps.merge(listStamps)
				l.stamps = stamps
			}
			return l, nil
		}
		stamps.close()
		listStamps.close()
		prev = after
	}
}

// listTry is one try of list: the commits, the files (stamped into
// stamps unless nil) and, on the first try, the manifest into m.
func (fs *fileSet) listTry(ctx context.Context, prev *commitView, stamped stampedStore, stamps *dirStamps, first bool, m *manifestView, early func(manifestView)) (entries []storeEntry, before, after *commitView, err error) {
	// The commits are read before and after the listing: a compaction
	// places its outputs before it commits and removes its inputs after,
	// so a listing between two reads of the same commits shows every
	// file they name.
	before, err = loadCommits(ctx, fs.store, fs.table, prev)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("outbox: read commits of %s: %w", fs.store.where(fs.table, ""), err)
	}
	// The files are listed while the manifest is read (and used): each
	// of its entries is checked against the listing afterwards, so which
	// comes first does not matter.
	done := make(chan struct{})
	go func() {
		defer close(done)
		if stamps != nil {
			entries, err = stamped.listStamped(ctx, fs.table, stamps)
		} else {
			entries, err = fs.store.list(ctx, fs.table)
		}
	}()
	if first {
		*m = fs.loadManifest(ctx)
		if *m != nil && early != nil {
			early(*m)
		}
	}
	<-done
	if err != nil {
		return nil, nil, nil, fmt.Errorf("outbox: list %s: %w", fs.store.where(fs.table, ""), err)
	}
	after, err = loadCommits(ctx, fs.store, fs.table, before)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("outbox: read commits of %s: %w", fs.store.where(fs.table, ""), err)
	}
	return entries, before, after, nil
}

// keepListing keeps the last listing for a read that expired it, after
// its stamps were found unchanged; it reports false when this process
// wrote files or listed again meanwhile, and the caller lists. The
// listing keeps its age: the next read past the refresh interval lists
// everything again, which also loads a new manifest (a manifest changes
// which files are opened, never an answer, so a fresh read does not
// look for one).
func (fs *fileSet) keepListing(stamps *dirStamps) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.stale || fs.stamps != stamps {
		return false
	}
	fs.expired = false
	return true
}

// splitOdd separates a listing's data files from its entries outside the
// layout.
func splitOdd(listed []storeEntry) (files []storeEntry, odd []*FileError) {
	files = listed[:0:0]
	for _, e := range listed {
		if e.skip != nil {
			odd = append(odd, e.skip)
		} else {
			files = append(files, e)
		}
	}
	return files, odd
}

// reportOddLocked keeps the entries outside the layout for damaged, and
// logs those the last listing did not have.
func (fs *fileSet) reportOddLocked(odd []*FileError) {
	known := make(map[string]bool, len(fs.odd))
	for _, fe := range fs.odd {
		known[fe.Path+"\x00"+fe.Reason] = true
	}
	for _, fe := range odd {
		if !known[fe.Path+"\x00"+fe.Reason] {
			fs.log.Warn("outbox: skipped entry outside the table layout", "path", fe.Path, "reason", fe.Reason, "err", fe.Err)
		}
	}
	fs.odd = odd
}

// loadManifest reads the table's manifest. One that cannot be used is
// logged (once for as long as it stays the same) and ignored: lookups then
// open every file, as without a manifest.
func (fs *fileSet) loadManifest(ctx context.Context) manifestView {
	m, err := readManifest(ctx, fs.store, fs.table)
	if err == nil {
		return m
	}
	msg := err.Error()
	fs.mu.Lock()
	repeat := fs.badManifest == msg
	fs.badManifest = msg
	fs.mu.Unlock()
	if !repeat {
		fs.log.Warn("outbox: ignored manifest", "path", manifestWhere(fs.store, fs.table), "err", err)
	}
	return nil
}

// openListedLocked opens every listed file that is not open (only those
// in want, unless want is nil), unless it is known bad in the same version.
func (fs *fileSet) openListedLocked(ctx context.Context, want map[string]*admission) {
	for _, e := range fs.listed {
		name := e.name
		if _, ok := want[name]; want != nil && !ok {
			continue
		}
		if f, ok := fs.files[name]; ok && f.size == e.size && f.modTime.Equal(e.modTime) {
			continue
		} else if ok {
			fs.dropLocked(name, f) // replaced in place (same name rewritten)
		}
		if b, ok := fs.bad[name]; ok && b.size == e.size && b.modTime.Equal(e.modTime) {
			continue
		}
		p, err := fs.open(ctx, name)
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) {
				fe = &FileError{Path: fs.store.where(fs.table, name), Reason: "cannot open", Err: err}
			}
			if errors.Is(fe.Err, os.ErrNotExist) {
				continue
			}
			fs.bad[name] = badFile{size: e.size, modTime: e.modTime, err: fe}
			fs.log.Warn("outbox: skipped file", "path", fe.Path, "reason", fe.Reason, "err", fe.Err)
			continue
		}
		delete(fs.bad, name)
		fs.files[name] = &openFile{pqFile: p, modTime: e.modTime}
	}
}

// holdLocked returns the current files (only those in want, unless want
// is nil), each held until release.
func (fs *fileSet) holdLocked(want map[string]*admission) []*openFile {
	out := make([]*openFile, 0, len(fs.files))
	fs.uses++
	for name, f := range fs.files {
		if _, ok := want[name]; want != nil && !ok {
			continue
		}
		f.refs++
		f.used = fs.uses
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// open opens one file of the set.
func (fs *fileSet) open(ctx context.Context, name string) (*pqFile, error) {
	where := fs.store.where(fs.table, name)
	ra, size, err := fs.store.open(ctx, fs.table, name)
	if err != nil {
		var fe *FileError
		if errors.As(err, &fe) {
			return nil, fe
		}
		return nil, &FileError{Path: where, Reason: "cannot open", Err: err}
	}
	p, err := openParquet(where, fs.table, ra, size)
	if err != nil {
		ra.Close()
		return nil, err
	}
	p.name = name
	return p, nil
}

func (fs *fileSet) dropLocked(name string, f *openFile) {
	delete(fs.files, name)
	f.gone = true
	if f.refs == 0 {
		f.close()
	}
}

func (fs *fileSet) release(files []*openFile) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, f := range files {
		f.refs--
		if f.gone && f.refs == 0 {
			f.close()
		}
	}
	fs.evictLocked()
}

// evictLocked closes idle files, least recently used first, until at most
// maxOpen stay open and their cached footers and filters fit cacheBytes.
func (fs *fileSet) evictLocked() {
	var total int64
	for _, f := range fs.files {
		total += f.CachedBytes()
	}
	if len(fs.files) <= fs.maxOpen && total <= fs.cacheBytes {
		return
	}
	idle := make([]*openFile, 0, len(fs.files))
	for _, f := range fs.files {
		if f.refs == 0 {
			idle = append(idle, f)
		}
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].used < idle[j].used })
	for _, f := range idle {
		if len(fs.files) <= fs.maxOpen && total <= fs.cacheBytes {
			return
		}
		total -= f.CachedBytes()
		fs.dropLocked(f.name, f)
	}
}

// damaged returns the files currently skipped, and the entries outside
// the layout.
func (fs *fileSet) damaged() []*FileError {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]*FileError, 0, len(fs.bad)+len(fs.odd))
	for _, b := range fs.bad {
		out = append(out, b.err)
	}
	return append(out, fs.odd...)
}

// markBad takes a file that failed while being read out of service. A
// file that vanished (compacted away by another process since the listing)
// is not damaged: it is forgotten, the next read lists again, and markBad
// reports true so the caller can retry.
func (fs *fileSet) markBad(f *openFile, err error) (vanished bool) {
	if errors.Is(err, os.ErrNotExist) || gcerrors.Code(err) == gcerrors.NotFound {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		if cur, ok := fs.files[f.name]; ok && cur == f {
			fs.dropLocked(f.name, f)
		}
		fs.stale = true
		return true
	}
	var fe *FileError
	if !errors.As(err, &fe) {
		fe = &FileError{Path: f.path, Reason: "read failed", Err: err}
	}
	fs.log.Warn("outbox: skipped file", "path", fe.Path, "reason", fe.Reason, "err", fe.Err)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	name := f.name
	if cur, ok := fs.files[name]; ok && cur == f {
		fs.dropLocked(name, f)
		fs.bad[name] = badFile{size: f.size, modTime: f.modTime, err: fe}
	}
	return false
}

func (fs *fileSet) closeAll() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.stamps.close()
	fs.stamps = nil
	for name, f := range fs.files {
		fs.dropLocked(name, f)
	}
}
