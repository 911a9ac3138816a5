package parquetbox

import (
	"context"
	"errors"
	"fmt"
	"gocloud.dev/blob"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// LiveFile is a data file of a table: one the store's readers read now
// (LiveFiles), or one they read until a compaction replaced it
// (ReplacedFiles).
type LiveFile struct {
	// Name is the file's name within its table's directory:
	// "created_date=2026-11-29/b0of8-<processor>-0000000000000003.parquet".
	Name string
	// Day is the UTC midnight of the file's partition (its created_date):
	// the day of created_at of every row it holds.
	Day time.Time
	// Location is where an engine or a catalog finds the file: on a
	// directory root "file://" and the file's absolute path, unescaped
	// ("file:///var/lib/ctdispatch/outbox/dispatch_outbox/created_date=…/….parquet");
	// on a bucket root the bucket's URL without its query, the prefix and
	// the object's key ("gs://bucket/prefix/dispatch_outbox/created_date=…/….parquet";
	// for Config.Bucket, Config.BucketURL names the bucket).
	Location string
	// Size is the file's size in bytes.
	Size int64
}

// ErrLiveFile is the error (wrapped, with the file's path and the rule)
// of RemoveReplaced asked to remove a file the store's readers read now,
// or an output of a compaction not committed yet, which they may read
// next.
var ErrLiveFile = errors.New("outbox: file is live")

// viewTries bounds the listings LiveFiles, ReplacedFiles and
// RemoveReplaced make while the table's commits keep changing.
const viewTries = 5

// LiveFiles returns, sorted by Name, exactly the data files of table t
// that the store's readers (Latest, Lookup, Pending, Stats, query) read
// now: every unit's newest commit honoured as they honour it (see
// docs/outbox.md, "Commits: what a compaction makes visible"), from one
// listing made between two reads of the same commits, so that the set is
// the table at one moment. Not in it: the schema file (no rows),
// temporaries, outputs of compactions that lost or are not committed yet,
// inputs a compaction folded (and files of units retention dropped) that
// still lie on storage, and files the readers skip as damaged or foreign
// (Damaged lists them). Each file is opened once per version to know
// that; later calls only list. A table nothing was written to has none.
//
// While the tables are published (PublicationKey), a file once in this
// list stays on storage until RemoveReplaced removes it.
func (o *Outbox) LiveFiles(ctx context.Context, t outbox.Table) ([]LiveFile, error) {
	v, err := o.view(ctx, t)
	if err != nil {
		return nil, err
	}
	return o.liveFiles(t, v.readable)
}

// ReplacedFiles returns, sorted by Name, the data files of table t that
// the store's readers read until a compaction folded them into its
// outputs (or dropped their unit by retention), and that still lie on
// storage: while the tables are published (PublicationKey), compaction
// leaves them for the publisher to remove with RemoveReplaced once no
// snapshot it keeps names them. Outputs of compactions that lost are not
// among them (compaction removes those).
func (o *Outbox) ReplacedFiles(ctx context.Context, t outbox.Table) ([]LiveFile, error) {
	v, err := o.view(ctx, t)
	if err != nil {
		return nil, err
	}
	return o.liveFiles(t, v.replaced)
}

// RemoveReplaced removes files of table t, named as LiveFile.Name names
// them, that the store's readers no longer read: files ReplacedFiles
// lists, or outputs of compactions that lost. It refuses the whole call,
// removing nothing, if a name is not a data file's name, or names a file
// the readers read now or an output of a compaction of its unit not yet
// committed (both errors match ErrLiveFile). A name no longer on storage
// is skipped.
func (o *Outbox) RemoveReplaced(ctx context.Context, t outbox.Table, names []string) error {
	if err := t.Validate(); err != nil {
		return err
	}
	for _, name := range names {
		if _, _, ok := splitName(name); !ok {
			return fmt.Errorf("outbox: remove %q from %s: not a data file's name; want created_date=YYYY-MM-DD/<file>.parquet, not hidden", name, t)
		}
	}
	v, err := o.view(ctx, t)
	if err != nil {
		return err
	}
	hidden := make(map[string]bool, len(v.hidden))
	for _, e := range v.hidden {
		hidden[e.name] = true
	}
	var remove []string
	for _, name := range names {
		where := o.store.where(t, name)
		if v.visible[name] {
			return fmt.Errorf("outbox: will not remove %s: %w: the store's readers read it now; only files a compaction folded in or retention dropped, and outputs of compactions that lost, may be removed", where, ErrLiveFile)
		}
		if g, tagged := outputGen(name); tagged {
			var top uint64
			if c := v.commits.unit(unitOf(name)); c != nil {
				top = c.body.Gen
			}
			if g > top {
				return fmt.Errorf("outbox: will not remove %s: %w: an output of a compaction not committed yet (generation %d; the unit's newest commit is %d), which the readers read once it commits", where, ErrLiveFile, g, top)
			}
		}
		if hidden[name] {
			remove = append(remove, name)
		}
	}
	defer o.files[t].invalidate()
	for _, name := range remove {
		if err := o.store.remove(ctx, t, name); err != nil {
			return fmt.Errorf("outbox: remove replaced %s: %w", o.store.where(t, name), err)
		}
	}
	if err := o.store.sync(t); err != nil {
		return fmt.Errorf("outbox: sync %s: %w", o.store.where(t, ""), err)
	}
	return nil
}

// tableView is a table as one listing made between two reads of the same
// commits shows it.
type tableView struct {
	// visible are the names of the files the commits let readers read;
	// readable are those of them that open (what readers read).
	visible  map[string]bool
	readable []storeEntry
	// hidden are the files the commits hide; replaced are those of them
	// that a commit names as folded in.
	hidden, replaced []storeEntry
	commits          *commitView
}

// view lists table t as tableView says, listing again while its commits
// move during a listing.
func (o *Outbox) view(ctx context.Context, t outbox.Table) (tableView, error) {
	if err := o.checkOpen(); err != nil {
		return tableView{}, err
	}
	if err := t.Validate(); err != nil {
		return tableView{}, err
	}
	fs := o.files[t]
	prev := fs.currentCommits()
	for range viewTries {
		var m manifestView
		entries, before, after, err := fs.listTry(ctx, prev, nil, nil, false, &m, nil)
		if err != nil {
			return tableView{}, err
		}
		prev = after
		if !sameCommits(before, after) {
			continue
		}
		visible, hidden := visibleEntries(entries, after, after)
		files, _ := splitOdd(visible)
		v := tableView{visible: make(map[string]bool, len(files)), hidden: hidden, commits: after}
		for _, e := range hidden {
			if c := after.unit(unitOf(e.name)); c != nil && c.consumed[e.name] {
				v.replaced = append(v.replaced, e)
			}
		}
		vanished := false
		for _, e := range files {
			v.visible[e.name] = true
			ok, err := fs.readable(ctx, e)
			if errors.Is(err, os.ErrNotExist) {
				// Removed since the listing (a compaction of an
				// unpublished root): the commits moved on.
				vanished = true
				break
			}
			if err != nil {
				return tableView{}, err
			}
			if ok {
				v.readable = append(v.readable, e)
			}
		}
		if !vanished {
			fs.forgetChecked(entries)
			return v, nil
		}
	}
	return tableView{}, fmt.Errorf("outbox: list %s: its commits changed during each of %d listings; try again", o.store.where(t, ""), viewTries)
}

// liveFiles describes entries of table t, sorted by name.
func (o *Outbox) liveFiles(t outbox.Table, entries []storeEntry) ([]LiveFile, error) {
	base, err := o.tableLocation(t)
	if err != nil {
		return nil, err
	}
	out := make([]LiveFile, 0, len(entries))
	for _, e := range entries {
		part, _, _ := splitName(e.name)
		day, _ := time.Parse(time.DateOnly, strings.TrimPrefix(part, partitionKey))
		out = append(out, LiveFile{Name: e.name, Day: day, Location: base + e.name, Size: e.size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Location returns the URL engines and catalogs reach the root by, the
// prefix of every LiveFile.Location, without a trailing "/": on a
// directory root "file://" and its absolute path; on a bucket root the
// bucket's URL without its query, with its prefix ("gs://bucket/prefix");
// for Config.Bucket, Config.BucketURL so written, and an error naming
// that option when it is empty. Root, by contrast, is the root as given
// (empty for Config.Bucket).
func (o *Outbox) Location() (string, error) {
	switch s := o.store.(type) {
	case localStore:
		abs, err := filepath.Abs(s.root)
		if err != nil {
			return "", fmt.Errorf("outbox: the absolute path of %s: %w", s.root, err)
		}
		return "file://" + strings.TrimSuffix(filepath.ToSlash(abs), "/"), nil
	case *blobStore:
		if s.url == anonymousBucket {
			return "", errors.New("outbox: the root's location: Config.BucketURL is empty; set it to the URL engines read Config.Bucket by (gs://bucket/prefix)")
		}
		return s.url, nil
	}
	return "", fmt.Errorf("outbox: the root's location: unknown storage %T", o.store)
}

// tableLocation is the absolute location of table t's directory, ending
// in "/" (see LiveFile.Location).
func (o *Outbox) tableLocation(t outbox.Table) (string, error) {
	if s, ok := o.store.(*blobStore); ok && s.url == anonymousBucket {
		return "", fmt.Errorf("outbox: the location of %s's files: Config.BucketURL is empty; set it to the URL engines read Config.Bucket by (gs://bucket/prefix)", t)
	}
	root, err := o.Location()
	if err != nil {
		return "", err
	}
	return root + "/" + string(t) + "/", nil
}

// fileVersion is a listed file's size and modification time.
type fileVersion struct {
	size    int64
	modTime time.Time
}

// readable reports whether the readers read the listed file e: whether it
// opens as a file of the table. A file not yet known in this version is
// opened (and closed) once; one that does not open is reported as the
// readers report it. A file gone since the listing is os.ErrNotExist; a
// failure to reach it is returned.
func (fs *fileSet) readable(ctx context.Context, e storeEntry) (bool, error) {
	v := fileVersion{e.size, e.modTime}
	fs.mu.Lock()
	f, open := fs.files[e.name]
	b, bad := fs.bad[e.name]
	known := fs.checked[e.name] == v
	fs.mu.Unlock()
	switch {
	case open && f.size == e.size && f.modTime.Equal(e.modTime), known:
		return true, nil
	case bad && b.size == e.size && b.modTime.Equal(e.modTime):
		return false, nil
	}
	ra, size, err := fs.store.open(ctx, fs.table, e.name)
	var fe *FileError
	if err != nil && !errors.As(err, &fe) {
		return false, err
	}
	var p *pqFile
	if err == nil {
		p, err = openParquet(fs.store.where(fs.table, e.name), fs.table, ra, size)
		if err != nil {
			ra.Close()
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err != nil {
		if !errors.As(err, &fe) {
			return false, err
		}
		fs.bad[e.name] = badFile{size: e.size, modTime: e.modTime, err: fe}
		fs.log.Warn("outbox: skipped file", "path", fe.Path, "reason", fe.Reason, "err", fe.Err)
		return false, nil
	}
	p.close()
	fs.checked[e.name] = v
	return true, nil
}

// forgetChecked forgets the files checked by readable that are not in
// listed.
func (fs *fileSet) forgetChecked(listed []storeEntry) {
	names := make(map[string]bool, len(listed))
	for _, e := range listed {
		names[e.name] = true
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for name := range fs.checked {
		if !names[name] {
			delete(fs.checked, name)
		}
	}
}

// currentCommits returns the commits the last listing read (nil: none).
func (fs *fileSet) currentCommits() *commitView {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.commits
}

// Bucket is the bucket a bucket root's files are in (with the root's
// prefix, as the outbox reads and writes it), nil for a directory root.
// Tools that write beside the tables, such as the Iceberg publisher's
// metadata under _iceberg/, use it to reach the same storage the same
// way. The outbox owns it: do not close it.
func (o *Outbox) Bucket() *blob.Bucket {
	if s, ok := o.store.(*blobStore); ok {
		return s.bucket
	}
	return nil
}
