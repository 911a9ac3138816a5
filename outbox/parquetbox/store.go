package parquetbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	// mem:// is always available; gs:// and s3:// come with the cloudblob
	// subpackage, which keeps their client libraries out of programs that
	// do not need them.
	_ "gocloud.dev/blob/memblob"
)

// tableStore holds the Parquet files of the tables: a local directory or a
// bucket. Writes are atomic in both: a file is either complete or absent.
// A file's name is relative to its table's directory and uses "/":
// "created_date=2026-11-23/x.parquet".
type tableStore interface {
	// list returns the table's data files in partitions (hidden
	// temporaries and directories within partitions, such as the schema
	// file's, excluded), and the entries outside the layout as entries
	// whose skip is set.
	list(ctx context.Context, t outbox.Table) ([]storeEntry, error)
	// open opens a file for random access.
	open(ctx context.Context, t outbox.Table, name string) (readerAtCloser, int64, error)
	// openListed opens a file as listed, failing if its size differs,
	// without asking a bucket for its attributes again.
	openListed(ctx context.Context, t outbox.Table, e storeEntry) (readerAtCloser, error)
	// create starts a file that appears under name only on commit.
	create(ctx context.Context, t outbox.Table, name string) (storeWriter, error)
	// createNew is create for a file that must never replace another:
	// its commit fails with errExists, writing nothing, if name exists.
	createNew(ctx context.Context, t outbox.Table, name string) (storeWriter, error)
	// remove deletes a file; a missing one is not an error.
	remove(ctx context.Context, t outbox.Table, name string) error
	// sync makes removals durable (local directories).
	sync(t outbox.Table) error
	// where names a file for messages: a path or a URL.
	where(t outbox.Table, name string) string
	// cleanTemps removes temporaries older than before.
	cleanTemps(ctx context.Context, t outbox.Table, before time.Time)
	leaseStore
	close() error
}

type storeEntry struct {
	name    string
	size    int64
	modTime time.Time
	// skip, when set, makes this an entry outside the layout (name is
	// then the entry's own name, never a data file's): reported, not read.
	skip *FileError
}

type storeWriter interface {
	io.Writer
	commit() error
	abort()
}

// localStore keeps tables in <root>/<table>/.
type localStore struct{ root string }

func (s localStore) dir(t outbox.Table) string { return filepath.Join(s.root, string(t)) }

// stampedStore is a tableStore whose listings can be checked for change
// by a stat of each directory they read (stamp.go): a local directory. A
// bucket is listed again instead.
type stampedStore interface {
	// listStamped is list, stamping each directory it reads (the
	// table's and each partition's) before reading it.
	listStamped(ctx context.Context, t outbox.Table, stamps *dirStamps) ([]storeEntry, error)
	// stampDirs are the other directories what a listing of t shows
	// depends on: its commits'.
	stampDirs(t outbox.Table) []string
}

var _ stampedStore = localStore{}

func (s localStore) stampDirs(t outbox.Table) []string {
	return []string{s.leasePath(path.Join(commitDir, string(t)))}
}

func (s localStore) list(ctx context.Context, t outbox.Table) ([]storeEntry, error) {
	return s.listStamped(ctx, t, nil)
}

func (s localStore) listStamped(_ context.Context, t outbox.Table, stamps *dirStamps) ([]storeEntry, error) {
	root := s.dir(t)
	stamps.add(root)
	top, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // no table yet
	}
	if err != nil {
		return nil, err
	}
	var out []storeEntry
	odd := func(name, reason string, dir bool, cause error) {
		where := filepath.Join(root, name)
		if dir {
			where += string(filepath.Separator)
		}
		out = append(out, storeEntry{name: name, skip: outsideLayout(where, reason, dir, cause)})
	}
	for _, d := range top {
		name := d.Name()
		switch {
		case strings.HasPrefix(name, "."):
			// Hidden names are work files (temporaries), not data.
		case d.Type()&os.ModeSymlink != 0:
			// Not followed: a link may lead outside the outbox, or to a
			// partition twice (its rows then counted twice, and a
			// compaction through one name removing what the other lists);
			// buckets have no links, and the layout is real directories.
			odd(name, reasonSymlink, true, nil)
		case !d.IsDir():
			odd(name, reasonNotInPartition, false, nil)
		case !isPartitionDir(name):
			odd(name, reasonNotPartition, true, nil)
		default:
			stamps.add(filepath.Join(root, name))
			entries, err := os.ReadDir(filepath.Join(root, name))
			if errors.Is(err, os.ErrNotExist) {
				continue // removed while listing
			}
			if err != nil {
				odd(name, reasonUnreadable, true, err)
				// What ReadDir read before the error is listed still.
			}
			for _, e := range entries {
				if e.IsDir() || !isDataFile(e.Name()) {
					continue
				}
				info, err := e.Info() // lstat: a named pipe is listed, never opened
				if err != nil {
					continue // removed while listing
				}
				out = append(out, storeEntry{name: path.Join(name, e.Name()), size: info.Size(), modTime: info.ModTime()})
			}
		}
	}
	return out, nil
}

func (s localStore) open(_ context.Context, t outbox.Table, name string) (readerAtCloser, int64, error) {
	f, st, err := openRegular(filepath.Join(s.dir(t), name))
	if err != nil {
		return nil, 0, err
	}
	return f, st.Size(), nil
}

func (s localStore) openListed(ctx context.Context, t outbox.Table, e storeEntry) (readerAtCloser, error) {
	f, size, err := s.open(ctx, t, e.name)
	if err == nil && size != e.size {
		f.Close()
		return nil, fmt.Errorf("%s: %d bytes, listed with %d", s.where(t, e.name), size, e.size)
	}
	return f, err
}

// openRegular opens a regular file for reading, and refuses anything else
// before opening it: opening a named pipe blocks until a writer comes,
// which may be never, and a device may be endless. The mode is checked
// again on the opened file, in case the name changed hands in between.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, notRegular(path, st.Mode())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err = f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = notRegular(path, st.Mode())
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

func notRegular(path string, mode os.FileMode) error {
	return &FileError{Path: path, Reason: fmt.Sprintf("not a regular file (mode %s); only regular files are read", mode.Type()), Err: ErrForeignFile}
}

func (s localStore) create(_ context.Context, t outbox.Table, name string) (storeWriter, error) {
	return createAtomic(filepath.Join(s.dir(t), name))
}

func (s localStore) createNew(_ context.Context, t outbox.Table, name string) (storeWriter, error) {
	a, err := createAtomic(filepath.Join(s.dir(t), name))
	if err != nil {
		return nil, err
	}
	a.noReplace = true
	return a, nil
}

func (s localStore) remove(_ context.Context, t outbox.Table, name string) error {
	err := os.Remove(filepath.Join(s.dir(t), name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func (s localStore) sync(t outbox.Table) error { return syncDir(s.dir(t)) }

func (s localStore) where(t outbox.Table, name string) string { return filepath.Join(s.dir(t), name) }

func (s localStore) cleanTemps(_ context.Context, t outbox.Table, before time.Time) {
	var dirs []string
	if entries, err := os.ReadDir(s.dir(t)); err == nil {
		for _, e := range entries {
			if e.Type().IsDir() && isPartitionDir(e.Name()) {
				dirs = append(dirs, filepath.Join(s.dir(t), e.Name()))
			}
		}
	}
	for _, dir := range dirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !isTemp(e.Name()) {
				continue
			}
			if info, err := e.Info(); err == nil && info.ModTime().Before(before) {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// removeEmptyPartition removes a partition directory left empty (by
// retention); a directory still in use is left alone.
func (s localStore) removeEmptyPartition(t outbox.Table, partition string) {
	if partition != "" {
		_ = os.Remove(filepath.Join(s.dir(t), partition))
	}
}

func (s localStore) close() error { return nil }

func isTemp(name string) bool { return strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") }

// blobStore keeps tables in a bucket under <prefix><table>/. An object
// becomes visible only when its writer closes, so no rename is needed.
type blobStore struct {
	bucket *blob.Bucket
	url    string // for messages and locations; anonymousBucket if unknown
	owned  bool   // opened from a URL, closed with the outbox
}

// anonymousBucket names, in messages, a bucket given as Config.Bucket
// without Config.BucketURL.
const anonymousBucket = "bucket:"

func openBlobStore(ctx context.Context, url string) (*blobStore, error) {
	b, err := blob.OpenBucket(ctx, url)
	if err != nil {
		if strings.HasPrefix(url, "gs://") || strings.HasPrefix(url, "s3://") {
			err = fmt.Errorf("%w (import github.com/ctdispatch/ctdispatch/outbox/cloudblob to register gs:// and s3://)", err)
		}
		return nil, fmt.Errorf("outbox: open bucket %s: %w", url, err)
	}
	return &blobStore{bucket: b, url: displayURL(url), owned: true}, nil
}

// displayURL turns a bucket URL into the prefix of object names in
// messages: gs://b?prefix=p/ becomes gs://b/p (other parameters dropped).
func displayURL(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return strings.TrimSuffix(raw, "/")
	}
	name := strings.Trim(path.Join(u.Host, u.Path, u.Query().Get("prefix")), "/")
	return u.Scheme + "://" + name
}

func (s *blobStore) key(t outbox.Table, name string) string { return path.Join(string(t), name) }

func (s *blobStore) list(ctx context.Context, t outbox.Table) ([]storeEntry, error) {
	var out []storeEntry
	reported := map[string]bool{}
	err := s.each(ctx, string(t)+"/", func(obj *blob.ListObject) {
		name := strings.TrimPrefix(obj.Key, string(t)+"/")
		if obj.IsDir {
			return
		}
		dir, base, _ := strings.Cut(name, "/")
		switch {
		case strings.HasPrefix(dir, "."):
			// Hidden names are work files, not data.
		case base == "":
			out = append(out, storeEntry{name: name, skip: outsideLayout(s.where(t, name), reasonNotInPartition, false, nil)})
		case !isPartitionDir(dir):
			// An object store has no directories: the prefix is reported
			// once, as the directory a listing shows.
			if !reported[dir] {
				reported[dir] = true
				out = append(out, storeEntry{name: dir, skip: outsideLayout(s.where(t, dir)+"/", reasonNotPartition, true, nil)})
			}
		default:
			if _, _, ok := splitName(name); ok {
				out = append(out, storeEntry{name: name, size: obj.Size, modTime: obj.ModTime})
			}
		}
	})
	return out, err
}

// each calls fn for every object whose key starts with prefix.
func (s *blobStore) each(ctx context.Context, prefix string, fn func(*blob.ListObject)) error {
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		fn(obj)
	}
}

func (s *blobStore) open(ctx context.Context, t outbox.Table, name string) (readerAtCloser, int64, error) {
	key := s.key(t, name)
	attrs, err := s.bucket.Attributes(ctx, key)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, 0, fmt.Errorf("%w: %v", os.ErrNotExist, err)
		}
		return nil, 0, err
	}
	return &blobReaderAt{ctx: context.WithoutCancel(ctx), bucket: s.bucket, key: key, size: attrs.Size}, attrs.Size, nil
}

func (s *blobStore) openListed(ctx context.Context, t outbox.Table, e storeEntry) (readerAtCloser, error) {
	return &blobReaderAt{ctx: context.WithoutCancel(ctx), bucket: s.bucket, key: s.key(t, e.name), size: e.size}, nil
}

func (s *blobStore) create(ctx context.Context, t outbox.Table, name string) (storeWriter, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := s.bucket.NewWriter(wctx, s.key(t, name), &blob.WriterOptions{ContentType: "application/vnd.apache.parquet"})
	if err != nil {
		cancel()
		return nil, err
	}
	return &blobWriter{w: w, cancel: cancel, bucket: s.bucket, key: s.key(t, name)}, nil
}

// createNew writes the file in memory and then in one conditional write
// (ifGenerationMatch=0 on GCS): a stream aborted half-way would have to
// delete its key, which may be the file it must not replace. A file this
// is used for (a log segment's or an exported batch's, for one table,
// day and bucket) is small.
func (s *blobStore) createNew(ctx context.Context, t outbox.Table, name string) (storeWriter, error) {
	return &blobNewWriter{ctx: context.WithoutCancel(ctx), bucket: s.bucket, key: s.key(t, name)}, nil
}

func (s *blobStore) remove(ctx context.Context, t outbox.Table, name string) error {
	err := s.bucket.Delete(ctx, s.key(t, name))
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil
	}
	return err
}

func (s *blobStore) sync(outbox.Table) error { return nil }

func (s *blobStore) where(t outbox.Table, name string) string { return s.url + "/" + s.key(t, name) }

func (s *blobStore) cleanTemps(context.Context, outbox.Table, time.Time) {} // objects have no temporaries

func (s *blobStore) close() error {
	if s.owned {
		return s.bucket.Close()
	}
	return nil
}

// blobReaderAt reads an object by ranges, as Parquet readers seek.
type blobReaderAt struct {
	ctx    context.Context
	bucket *blob.Bucket
	key    string
	size   int64
}

func (r *blobReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	n := int64(len(p))
	if off+n > r.size {
		n = r.size - off
	}
	rr, err := r.bucket.NewRangeReader(r.ctx, r.key, off, n, nil)
	if err != nil {
		return 0, err
	}
	defer rr.Close()
	got, err := io.ReadFull(rr, p[:n])
	if err == nil && got < len(p) {
		err = io.EOF
	}
	return got, err
}

func (r *blobReaderAt) Close() error { return nil }

// blobWriter commits on Close and aborts by cancelling its context first.
// Some drivers still create the object when the cancel comes late, so an
// abort also deletes it.
type blobWriter struct {
	w      *blob.Writer
	cancel context.CancelFunc
	bucket *blob.Bucket
	key    string
}

func (w *blobWriter) Write(p []byte) (int, error) { return w.w.Write(p) }

func (w *blobWriter) commit() error {
	defer w.cancel()
	return w.w.Close()
}

func (w *blobWriter) abort() {
	w.cancel()
	_ = w.w.Close()
	_ = w.bucket.Delete(context.Background(), w.key)
}

// blobNewWriter is blobStore.createNew's writer.
type blobNewWriter struct {
	ctx    context.Context
	bucket *blob.Bucket
	key    string
	buf    bytes.Buffer
}

func (w *blobNewWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }

func (w *blobNewWriter) commit() error {
	err := w.bucket.WriteAll(w.ctx, w.key, w.buf.Bytes(), &blob.WriterOptions{IfNotExist: true, ContentType: "application/vnd.apache.parquet"})
	switch gcerrors.Code(err) {
	case gcerrors.FailedPrecondition, gcerrors.AlreadyExists:
		return errExists
	}
	return err
}

func (w *blobNewWriter) abort() { w.buf.Reset() }
