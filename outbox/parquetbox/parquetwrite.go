package parquetbox

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqfile"
	"github.com/ctdispatch/ctdispatch/outbox/internal/pqtable"
	"github.com/ctdispatch/ctdispatch/outbox/internal/tableschema"
)

// recordBefore is the order every file written by this package has: by
// ID, then by state, oldest first.
func recordBefore(a, b *outbox.Record) bool {
	if a.ID != b.ID {
		return a.ID < b.ID
	}
	return outbox.Newer(b, a)
}

// sortRecords sorts records in place into file order.
func sortRecords(recs []outbox.Record) {
	sort.SliceStable(recs, func(i, j int) bool { return recordBefore(&recs[i], &recs[j]) })
}

// sortRecordPtrs sorts pointers to records into file order, moving eight
// bytes per swap instead of a whole record.
func sortRecordPtrs(recs []*outbox.Record) {
	sort.SliceStable(recs, func(i, j int) bool { return recordBefore(recs[i], recs[j]) })
}

// rowWriter streams sorted records of one table into a Parquet writer.
type rowWriter struct {
	table outbox.Table
	w     *pqtable.Writer
}

func newRowWriter(w io.Writer, t outbox.Table, l pqfile.Layout) *rowWriter {
	return &rowWriter{table: t, w: pqtable.NewWriter(w, string(t), t.IDColumn(), l)}
}

func (rw *rowWriter) write(r *outbox.Record) error {
	row := tableschema.RowOf(r)
	return rw.w.Write(&row)
}

func (rw *rowWriter) close() error { return rw.w.Close() }

// atomicFile writes a file so that it appears complete or not at all: data
// goes to a hidden temporary file in the same directory, which is synced,
// renamed into place, and the directory synced. With noReplace it is
// linked into place instead, which fails (errExists) if the name exists.
type atomicFile struct {
	f         *os.File
	path      string
	noReplace bool
}

// errExists is the commit of a file created only if absent, when
// something already had its name: nothing was written.
var errExists = errors.New("a file of that name exists")

func createAtomic(path string) (*atomicFile, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(filePerm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &atomicFile{f: f, path: path}, nil
}

func (a *atomicFile) Write(p []byte) (int, error) { return a.f.Write(p) }

// commit makes the file durable under its final name.
func (a *atomicFile) commit() error {
	if err := a.f.Sync(); err != nil {
		a.abort()
		return err
	}
	if err := a.f.Close(); err != nil {
		os.Remove(a.f.Name())
		return err
	}
	if a.noReplace {
		err := os.Link(a.f.Name(), a.path)
		os.Remove(a.f.Name())
		if errors.Is(err, os.ErrExist) {
			return errExists
		}
		if err != nil {
			return err
		}
	} else if err := os.Rename(a.f.Name(), a.path); err != nil {
		os.Remove(a.f.Name())
		return err
	}
	return syncDir(filepath.Dir(a.path))
}

func (a *atomicFile) abort() {
	a.f.Close()
	os.Remove(a.f.Name())
}

// writeRecords writes recs (in file order) as one Parquet file through w,
// committing it on success and aborting it otherwise.
func writeRecords(w storeWriter, t outbox.Table, recs []*outbox.Record) error {
	rw := newRowWriter(w, t, pqfile.FlushLayout)
	for _, r := range recs {
		if err := rw.write(r); err != nil {
			w.abort()
			return err
		}
	}
	if err := rw.close(); err != nil {
		w.abort()
		return err
	}
	return w.commit()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

const (
	filePerm os.FileMode = 0o600
	dirPerm  os.FileMode = 0o700
)
