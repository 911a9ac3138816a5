package pqtable

import (
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"

	"github.com/ctdispatch/ctdispatch/outbox"
	"github.com/ctdispatch/ctdispatch/outbox/internal/pqfile"
	"github.com/ctdispatch/ctdispatch/outbox/internal/tableschema"
)

// Writer streams sorted rows of one table into a Parquet file.
type Writer struct {
	w      *parquet.GenericWriter[any]
	schema tableschema.Schema
	buf    []parquet.Row
	n      int
}

// NewWriter returns a writer of the named table (timers, deliveries, or
// else dispatch_outbox), whose ID column is idColumn, in layout l.
func NewWriter(w io.Writer, table, idColumn string, l pqfile.Layout) *Writer {
	s := tableschema.SchemaOf(table)
	opts := append([]parquet.WriterOption{s.Parquet()}, pqfile.WriterOptions(idColumn, l)...)
	buf := make([]parquet.Row, writeBatch)
	for i := range buf {
		buf[i] = make(parquet.Row, len(s.Columns))
	}
	return &Writer{w: parquet.NewGenericWriter[any](w, opts...), schema: s, buf: buf}
}

// writeBatch is how many rows are handed to parquet-go at once.
const writeBatch = 1024

// Write adds r after the rows written before it.
func (w *Writer) Write(r *tableschema.Row) error {
	row := w.buf[w.n]
	for ci := range w.schema.Columns {
		row[ci] = w.schema.Columns[ci].Value(r, ci)
	}
	w.n++
	if w.n == len(w.buf) {
		return w.flushBuf()
	}
	return nil
}

func (w *Writer) flushBuf() error {
	_, err := w.w.WriteRows(w.buf[:w.n])
	w.n = 0
	return err
}

// Close writes the rows still buffered and the file's footer.
func (w *Writer) Close() error {
	if err := w.flushBuf(); err != nil {
		return err
	}
	return w.w.Close()
}

// RecordWriter writes one table's records as a Parquet file in the layout
// the outbox's log conversions write (sorted, zstd, bloom filters and page
// index on the IDs). Tools use it to build tables; records must come
// sorted by ID, oldest state first, which is what lookups and compaction
// rely on.
type RecordWriter struct {
	table outbox.Table
	w     *Writer
	last  string
	n     int64
}

// NewRecordWriter starts a file of table t on w.
func NewRecordWriter(w io.Writer, t outbox.Table) (*RecordWriter, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &RecordWriter{table: t, w: NewWriter(w, string(t), t.IDColumn(), pqfile.FlushLayout)}, nil
}

// Write adds a record. It fails if the record's ID sorts before the
// previous one's or the record is invalid.
func (rw *RecordWriter) Write(r outbox.Record) error {
	r.Table = rw.table
	if err := r.Validate(); err != nil {
		return err
	}
	if rw.n > 0 && r.ID < rw.last {
		return fmt.Errorf("outbox: record %s written after %s: records must be sorted by ID", r.ID, rw.last)
	}
	r.Normalize()
	rw.last = r.ID
	rw.n++
	row := tableschema.RowOf(&r)
	return rw.w.Write(&row)
}

// Close writes the footer. It does not close the underlying writer.
func (rw *RecordWriter) Close() error { return rw.w.Close() }
