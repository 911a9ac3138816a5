package parquetbox

import (
	"context"
	"errors"
	"io"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqtable"
	"github.com/ctdispatch/ctdispatch/outbox/internal/tableschema"
)

// field identifies the Record field a column fills.
type field = tableschema.Field

const (
	fieldID          = tableschema.FieldID
	fieldCloudTaskID = tableschema.FieldCloudTaskID
	fieldQueue       = tableschema.FieldQueue
	fieldRunID       = tableschema.FieldRunID
	fieldStatus      = tableschema.FieldStatus
	fieldProcessor   = tableschema.FieldProcessor
	fieldUpdatedAt   = tableschema.FieldUpdatedAt
	fieldVersion     = tableschema.FieldVersion
)

// pqFile is one Parquet file of a table as the outbox sees it: where it
// is, and the table's reader over it, whose rows it turns into records.
type pqFile struct {
	*pqtable.File
	path  string // for messages: a path or a URL
	name  string // within the table
	size  int64
	table outbox.Table
	f     io.Closer
}

// openParquet opens and checks a Parquet file of table t. Every failure is
// a *FileError naming the path and the reason; a file whose columns do not
// have the table's types matches ErrForeignFile.
func openParquet(path string, t outbox.Table, ra readerAtCloser, size int64) (*pqFile, error) {
	pf, err := pqtable.Open(ra, size, string(t), t.IDColumn())
	if err != nil {
		return nil, fileError(path, "not a readable Parquet file", err)
	}
	return &pqFile{File: pf, path: path, size: size, table: t, f: ra}, nil
}

// fileError turns an error of the table reader into a *FileError for
// path. Errors that are already FileErrors, and a cancelled context, pass
// unchanged.
func fileError(path, what string, err error) error {
	var fe *FileError
	if err == nil || errors.As(err, &fe) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pe *pqtable.Error
	if errors.As(err, &pe) {
		if errors.Is(pe.Err, pqtable.ErrForeign) {
			return &FileError{Path: path, Reason: pe.Reason, Err: ErrForeignFile}
		}
		return &FileError{Path: path, Reason: pe.Reason, Err: pe.Err} // matches ErrDamaged (FileError.Is)
	}
	return &FileError{Path: path, Reason: what, Err: err}
}

func (p *pqFile) close() error { return p.f.Close() }

// record turns a row of this file into a Record, without normalizing it
// (projected scans fill a few fields only).
func (p *pqFile) record(r *tableschema.Row) outbox.Record { return r.Record(p.table) }

// decode turns a whole row of this file into a normalized Record.
func (p *pqFile) decode(r *tableschema.Row) outbox.Record {
	rec := p.record(r)
	rec.Normalize()
	return rec
}

func (p *pqFile) decodeAll(rows []tableschema.Row) []outbox.Record {
	recs := make([]outbox.Record, len(rows))
	for i := range rows {
		recs[i] = p.decode(&rows[i])
	}
	return recs
}

// scan calls fn for every row of the file, in file order.
func (p *pqFile) scan(fn func(outbox.Record) error) error {
	return fileError(p.path, "reading rows", p.Scan(func(r *tableschema.Row) error { return fn(p.decode(r)) }))
}

// find returns every record whose column fld equals value (see
// pqtable.File.Find).
func (p *pqFile) find(fld field, value string, o pqtable.FindOptions) ([]outbox.Record, error) {
	rows, err := p.Find(fld, value, o)
	if err != nil {
		return nil, fileError(p.path, "reading rows", err)
	}
	return p.decodeAll(rows), nil
}

// readRows reads whole records at the given (ascending) row indexes of
// row group rg.
func (p *pqFile) readRows(rg int, idx []int64) ([]outbox.Record, error) {
	rows, err := p.ReadRows(rg, idx)
	if err != nil {
		return nil, fileError(p.path, "reading rows", err)
	}
	return p.decodeAll(rows), nil
}

// scanProjected calls fn for every row of the file with only the given
// fields filled (and Table), reading nothing but those columns.
func (p *pqFile) scanProjected(ctx context.Context, fields []field, fn func(rg int, row int64, r *outbox.Record)) error {
	err := p.ScanProjected(ctx, fields, func(rg int, row int64, r *tableschema.Row) {
		rec := p.record(r)
		fn(rg, row, &rec)
	})
	return fileError(p.path, "reading rows", err)
}

// readerAtCloser is what a Parquet file is read through.
type readerAtCloser interface {
	io.ReaderAt
	io.Closer
}
