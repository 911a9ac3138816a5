package parquetbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"gocloud.dev/blob"
	"golang.org/x/sync/errgroup"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqtable"
)

// manifestDir holds one manifest per table, beside the leases and outside
// the tables' directories, so engines reading a table (DuckDB globs,
// BigQuery external tables over <table>/*, Spark) never see it.
const manifestDir = "_manifests"

// maxManifestBytes bounds what is read as a manifest: about 150 bytes a
// row group, so this covers hundreds of thousands of row groups.
const maxManifestBytes = 64 << 20

// manifestKey is the key, relative to the root, of table t's manifest.
func manifestKey(t outbox.Table) string { return path.Join(manifestDir, string(t)) }

// manifestView is a loaded manifest, by file name.
type manifestView map[string]*pqtable.ManifestFile

// entry returns the manifest's description of the listed file e, or nil
// when the manifest does not know this version of it.
func (m manifestView) entry(e storeEntry) *pqtable.ManifestFile {
	f := m[e.name]
	if f == nil || f.Size != e.size || f.ModTime != e.modTime.UnixNano() {
		return nil
	}
	return f
}

// readManifest reads table t's manifest. It returns (nil, nil) when there
// is none, and an error matching pqtable.ErrManifest when what is there
// is not one this package wrote for t. Only a regular file is read, and
// never more than maxManifestBytes.
func readManifest(ctx context.Context, s tableStore, t outbox.Table) (manifestView, error) {
	data, err := s.get(ctx, manifestKey(t), maxManifestBytes)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	case errors.Is(err, errObjectTooLarge):
		return nil, fmt.Errorf("%w: %v", pqtable.ErrManifest, err)
	case err != nil:
		return nil, err
	}
	m, err := pqtable.UnmarshalManifest(data, string(t))
	if err != nil {
		return nil, err
	}
	v := make(manifestView, len(m.Files))
	for i := range m.Files {
		v[m.Files[i].Name] = &m.Files[i]
	}
	return v, nil
}

// writeManifest replaces table t's manifest atomically: a temporary file
// renamed into place locally, a single object write on a bucket. A reader
// sees the old manifest or the new one, never a mix. Temporaries a crashed
// writer left over an hour ago are removed first.
func writeManifest(ctx context.Context, s tableStore, t outbox.Table, m *pqtable.Manifest, now time.Time) error {
	data := pqtable.MarshalManifest(m)
	switch s := s.(type) {
	case localStore:
		dir := s.leasePath(manifestDir)
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if info, err := e.Info(); err == nil && isTemp(e.Name()) && info.ModTime().Before(now.Add(-time.Hour)) {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		}
		return s.put(ctx, manifestKey(t), data)
	case *blobStore:
		return s.bucket.WriteAll(ctx, manifestKey(t), data, &blob.WriterOptions{ContentType: "application/octet-stream"})
	}
	return nil
}

// manifestWhere names a table's manifest for messages.
func manifestWhere(s tableStore, t outbox.Table) string {
	switch s := s.(type) {
	case localStore:
		return s.leasePath(manifestKey(t))
	case *blobStore:
		return s.url + "/" + manifestKey(t)
	}
	return manifestKey(t)
}

// probeManifest decides, for a lookup of value in column fld, which
// listed files must be read and in which of their row groups. A file the
// manifest knows (same name, size and modification time) is read only if
// one of its row groups may hold value, judged from the ID bounds and one
// 32-byte block of a bloom filter bitset; a file it does not know, or that
// cannot be probed, is read whole (nil admit) as without a manifest.
// Files in open are already open, with their filters possibly in memory:
// they are read the usual way. A file pre probed already, as the manifest
// describes it, is not probed again. On a bucket, where each block is a
// round trip, files are probed concurrently.
func (fs *fileSet) probeManifest(ctx context.Context, listed []storeEntry, m manifestView, open map[string]bool, fld field, value string, pre prefetched) map[string]*admission {
	want := make(map[string]*admission, len(listed))
	var probes []*probe
	for _, e := range listed {
		mf := m.entry(e)
		if mf == nil || open[e.name] {
			want[e.name] = nil
			continue
		}
		if p := pre[e.name]; p != nil && p.mf == mf {
			p.listed = true
			if p.read {
				want[e.name] = p.admit
			}
			continue
		}
		probes = append(probes, &probe{e: e, mf: mf})
	}
	fs.runProbes(ctx, probes, fld, value, false)
	for _, p := range probes {
		if p.read {
			want[p.e.name] = p.admit
		}
	}
	return want
}

// probe is the decision about one file the manifest describes.
type probe struct {
	e     storeEntry
	mf    *pqtable.ManifestFile
	admit *admission
	read  bool
	// Set by prefetch: the file opened, and whether the listing then
	// showed the version the manifest describes.
	p      *pqFile
	listed bool
}

// runProbes probes the files, concurrently on a bucket; with open, it also
// opens each file to be read (a failure to is left to the usual open, which
// reports it).
func (fs *fileSet) runProbes(ctx context.Context, probes []*probe, fld field, value string, open bool) {
	h := pqtable.Hash(value)
	var g errgroup.Group
	g.SetLimit(fs.probeConcurrency())
	for _, p := range probes {
		g.Go(func() error {
			p.read, p.admit = fs.probeFile(ctx, p.e, p.mf, fld, value, h)
			if open && p.read {
				if f, err := fs.open(ctx, p.e.name); err == nil && f.size != p.e.size {
					f.close()
				} else if err == nil {
					p.p = f
				}
			}
			return nil
		})
	}
	_ = g.Wait()
}

// prefetched holds, by file name, what a lookup decided and opened from
// the manifest alone while the files were being listed.
type prefetched map[string]*probe

// prefetch probes the files of manifest m for a lookup of value in column
// fld, taking each at the size and modification time the manifest states,
// and opens those to be read: the work a lookup does after listing,
// done while the files are listed. Files open already, or known bad, are
// left to the usual way; so are names a listing never gives (outside the
// table's directory or its partitions, hidden), which a foreign manifest
// might hold.
func (fs *fileSet) prefetch(ctx context.Context, m manifestView, fld field, value string) prefetched {
	var probes []*probe
	fs.mu.Lock()
	for name, mf := range m {
		if _, _, ok := splitName(name); !ok {
			continue // not a name a listing gives: never opened on the manifest's word
		}
		e := storeEntry{name: name, size: mf.Size, modTime: time.Unix(0, mf.ModTime)}
		if f, ok := fs.files[name]; ok && f.size == e.size && f.modTime.Equal(e.modTime) {
			continue
		}
		if b, ok := fs.bad[name]; ok && b.size == e.size && b.modTime.Equal(e.modTime) {
			continue
		}
		probes = append(probes, &probe{e: e, mf: mf})
	}
	fs.mu.Unlock()
	fs.runProbes(ctx, probes, fld, value, true)
	pre := make(prefetched, len(probes))
	for _, p := range probes {
		pre[p.e.name] = p
	}
	return pre
}

// close closes the files opened and not adopted.
func (pre prefetched) close() {
	for _, p := range pre {
		if p.p != nil {
			p.p.close()
			p.p = nil
		}
	}
}

// adoptLocked keeps the files prefetch opened that the lookup reads and
// the listing showed as the manifest describes them, and closes the rest.
func (fs *fileSet) adoptLocked(pre prefetched, want map[string]*admission) {
	for name, p := range pre {
		if p.p == nil {
			continue
		}
		if _, wanted := want[name]; wanted && p.listed && fs.files[name] == nil {
			fs.files[name] = &openFile{pqFile: p.p, modTime: p.e.modTime}
			p.p = nil
		}
	}
	pre.close()
}

// admission is the row groups of a file a lookup reads; nil means all.
type admission struct {
	groups int   // row groups the manifest knows of
	rgs    []int // those to read, ascending
}

// admit returns the filter of a file whose footer has footerGroups row
// groups: nil (read all) unless the footer agrees with the manifest.
func (a *admission) admit(footerGroups int) func(rg int) bool {
	if a == nil || footerGroups != a.groups {
		return nil
	}
	return func(rg int) bool { return slices.Contains(a.rgs, rg) }
}

func (fs *fileSet) probeConcurrency() int {
	if _, ok := fs.store.(localStore); ok {
		return 1 // a pread from the page cache costs less than a goroutine
	}
	return 16
}

// probeFile returns whether the file is to be read and which row groups
// (nil: all, when the probe could not decide).
func (fs *fileSet) probeFile(ctx context.Context, e storeEntry, mf *pqtable.ManifestFile, fld field, value string, h uint64) (bool, *admission) {
	var ra readerAtCloser
	var admitted []int
	for gi := range mf.Groups {
		g := &mf.Groups[gi]
		if g.OutOfBounds(fld, value) {
			continue // decided without opening the file
		}
		if ra == nil {
			var err error
			if ra, err = fs.store.openListed(ctx, fs.table, e); err != nil {
				return true, nil
			}
			defer ra.Close()
		}
		ok, err := g.MayHold(fld, value, h, ra)
		if err != nil {
			return true, nil
		}
		if ok {
			admitted = append(admitted, gi)
		}
	}
	if len(admitted) == 0 {
		return false, nil
	}
	return true, &admission{groups: len(mf.Groups), rgs: admitted}
}

// refreshManifest writes the table's manifest from its files as listed
// now, unless the one in place already lists exactly them. Entries of
// files unchanged since the last manifest are taken over without reading
// the files again. Another compaction may replace files while this one
// builds its manifest, so the files are listed again after the write, and
// the manifest rebuilt (a few times at most) if they changed meanwhile; a
// manifest left behind by a race is merely stale, since readers check
// every entry against their own listing.
func (c *compaction) refreshManifest(ctx context.Context) ManifestRefresh {
	var rep ManifestRefresh
	for range 3 {
		before, err := c.o.store.list(ctx, c.t)
		if err != nil {
			return c.manifestFailed(err)
		}
		rep = c.buildManifest(ctx)
		if rep.Action != ManifestWritten {
			return rep
		}
		after, err := c.o.store.list(ctx, c.t)
		if err != nil || sameListing(before, after) {
			return rep
		}
	}
	return rep
}

func (c *compaction) manifestFailed(err error) ManifestRefresh {
	rep := ManifestRefresh{Action: ManifestFailed, Path: manifestWhere(c.o.store, c.t), Err: err}
	c.o.log.Warn("outbox: manifest not written", "path", rep.Path, "err", err)
	return rep
}

// sameListing reports whether two listings name the same versions of the
// same files.
func sameListing(a, b []storeEntry) bool {
	if len(a) != len(b) {
		return false
	}
	seen := make(map[string]storeEntry, len(a))
	for _, e := range a {
		seen[e.name] = e
	}
	for _, e := range b {
		if o, ok := seen[e.name]; !ok || o.size != e.size || !o.modTime.Equal(e.modTime) {
			return false
		}
	}
	return true
}

// buildManifest writes the manifest of the files open now, or reports it
// current.
func (c *compaction) buildManifest(ctx context.Context) ManifestRefresh {
	rep := ManifestRefresh{Path: manifestWhere(c.o.store, c.t)}
	fs := c.o.files[c.t]
	fs.invalidate()
	files, err := fs.acquire(ctx)
	if err != nil {
		return c.manifestFailed(err)
	}
	defer fs.release(files)
	old, err := readManifest(ctx, c.o.store, c.t)
	if err != nil {
		old = nil // damaged or foreign: replaced below
	}
	m := &pqtable.Manifest{Table: string(c.t)}
	current := err == nil && old != nil
	for _, f := range files {
		if !f.Ours() {
			continue // another writer's file: read the usual way
		}
		e := storeEntry{name: f.name, size: f.size, modTime: f.modTime}
		mf := old.entry(e)
		if mf == nil {
			current = false
			groups, err := f.ManifestGroups()
			if err != nil {
				continue
			}
			mf = &pqtable.ManifestFile{Name: f.name, Size: f.size, ModTime: f.modTime.UnixNano(), Groups: groups}
		}
		m.Files = append(m.Files, *mf)
		rep.Files++
		rep.RowGroups += len(mf.Groups)
	}
	if (current && len(old) == len(m.Files)) || (err == nil && old == nil && len(m.Files) == 0) {
		rep.Action = ManifestCurrent // nothing changed, or nothing to list
		return rep
	}
	if err := writeManifest(ctx, c.o.store, c.t, m, c.now); err != nil {
		return c.manifestFailed(err)
	}
	rep.Action = ManifestWritten
	return rep
}
