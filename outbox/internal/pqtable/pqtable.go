package pqtable

import (
	"io"
	"unsafe"

	"github.com/parquet-go/parquet-go"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqfile"
)

// Writer streams sorted rows of one table into a Parquet file.
type Writer struct {
	w      *parquet.GenericWriter[any]
	schema Schema
	buf    []parquet.Row
	n      int
}

// NewWriter returns a writer of the named table (timers, deliveries, or
// else dispatch_outbox), whose ID column is idColumn, in layout l.
func NewWriter(w io.Writer, table, idColumn string, l pqfile.Layout) *Writer {
	s := SchemaOf(table)
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
func (w *Writer) Write(r *Row) error {
	row := w.buf[w.n]
	for ci := range w.schema.Columns {
		row[ci] = w.schema.Columns[ci].value(r, ci)
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

// unsafeBytes returns the bytes of s without copying them; parquet-go
// copies a value's bytes into its buffers when the row is written.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
