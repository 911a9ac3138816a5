package outbox

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/parquet-go/parquet-go"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqfile"
)

// dispatchRow is the Parquet layout of the dispatch_outbox table. Strings
// stay plain strings (never the uuid tag, which parquet-go mis-encodes for
// string fields); columns with few distinct values are dictionary-encoded;
// the sorted ID column uses DELTA_BYTE_ARRAY, which stores only what differs
// from the previous ID; times are microsecond TIMESTAMPs adjusted to UTC.
type dispatchRow struct {
	DispatchID    string `parquet:"dispatch_id,delta"`
	CloudTaskID   string `parquet:"cloud_task_id"`
	Queue         string `parquet:"queue,dict"`
	RunID         string `parquet:"run_id,dict"`
	TaskKey       string `parquet:"task_key,dict"`
	Attempt       string `parquet:"attempt,dict"`
	Status        string `parquet:"status,dict"`
	ErrorCode     string `parquet:"error_code,dict"`
	CreateCalls   int32  `parquet:"create_calls,dict"`
	PayloadSHA256 string `parquet:"payload_sha256"`
	ProcessorUUID string `parquet:"processor_uuid,dict"`
	CreatedAt     int64  `parquet:"created_at,timestamp(microsecond:utc)"`
	UpdatedAt     int64  `parquet:"updated_at,timestamp(microsecond:utc)"`
}

// timerRow is the Parquet layout of the timers table: the dispatch columns
// plus kind and due_at.
type timerRow struct {
	TimerID       string `parquet:"timer_id,delta"`
	CloudTaskID   string `parquet:"cloud_task_id"`
	Queue         string `parquet:"queue,dict"`
	RunID         string `parquet:"run_id,dict"`
	TaskKey       string `parquet:"task_key,dict"`
	Attempt       string `parquet:"attempt,dict"`
	Kind          string `parquet:"kind,dict"`
	Status        string `parquet:"status,dict"`
	ErrorCode     string `parquet:"error_code,dict"`
	CreateCalls   int32  `parquet:"create_calls,dict"`
	PayloadSHA256 string `parquet:"payload_sha256"`
	ProcessorUUID string `parquet:"processor_uuid,dict"`
	CreatedAt     int64  `parquet:"created_at,timestamp(microsecond:utc)"`
	UpdatedAt     int64  `parquet:"updated_at,timestamp(microsecond:utc)"`
	DueAt         int64  `parquet:"due_at,timestamp(microsecond:utc)"`
}

func toDispatchRow(r *Record) dispatchRow {
	return dispatchRow{
		DispatchID: r.ID, CloudTaskID: r.CloudTaskID, Queue: r.Queue, RunID: r.RunID, TaskKey: r.TaskKey,
		Attempt: r.Attempt, Status: string(r.Status), ErrorCode: r.ErrorCode, CreateCalls: r.CreateCalls,
		PayloadSHA256: r.PayloadSHA256, ProcessorUUID: r.ProcessorUUID,
		CreatedAt: micros(r.CreatedAt), UpdatedAt: micros(r.UpdatedAt),
	}
}

func toTimerRow(r *Record) timerRow {
	return timerRow{
		TimerID: r.ID, CloudTaskID: r.CloudTaskID, Queue: r.Queue, RunID: r.RunID, TaskKey: r.TaskKey,
		Attempt: r.Attempt, Kind: r.Kind, Status: string(r.Status), ErrorCode: r.ErrorCode,
		CreateCalls: r.CreateCalls, PayloadSHA256: r.PayloadSHA256, ProcessorUUID: r.ProcessorUUID,
		CreatedAt: micros(r.CreatedAt), UpdatedAt: micros(r.UpdatedAt), DueAt: micros(r.DueAt),
	}
}

// recordBefore is the order every file written by this package has: by
// ID, then by state, oldest first.
func recordBefore(a, b *Record) bool {
	if a.ID != b.ID {
		return a.ID < b.ID
	}
	return newer(b, a)
}

// sortRecords sorts records in place into file order.
func sortRecords(recs []Record) {
	sort.SliceStable(recs, func(i, j int) bool { return recordBefore(&recs[i], &recs[j]) })
}

// sortRecordPtrs sorts pointers to records into file order, moving eight
// bytes per swap instead of a whole record.
func sortRecordPtrs(recs []*Record) {
	sort.SliceStable(recs, func(i, j int) bool { return recordBefore(recs[i], recs[j]) })
}

// rowWriter streams sorted records of one table into a Parquet writer.
type rowWriter struct {
	table Table
	dw    *parquet.GenericWriter[dispatchRow]
	tw    *parquet.GenericWriter[timerRow]
	dbuf  []dispatchRow
	tbuf  []timerRow
	rows  int64
}

func newRowWriter(w io.Writer, t Table, l pqfile.Layout) *rowWriter {
	rw := &rowWriter{table: t}
	if t == TableTimers {
		rw.tw = parquet.NewGenericWriter[timerRow](w, pqfile.WriterOptions(t.idColumn(), l)...)
	} else {
		rw.dw = parquet.NewGenericWriter[dispatchRow](w, pqfile.WriterOptions(t.idColumn(), l)...)
	}
	return rw
}

const writeBatch = 1024

func (rw *rowWriter) write(r *Record) error {
	rw.rows++
	if rw.tw != nil {
		rw.tbuf = append(rw.tbuf, toTimerRow(r))
		if len(rw.tbuf) >= writeBatch {
			return rw.flushBuf()
		}
		return nil
	}
	rw.dbuf = append(rw.dbuf, toDispatchRow(r))
	if len(rw.dbuf) >= writeBatch {
		return rw.flushBuf()
	}
	return nil
}

func (rw *rowWriter) flushBuf() error {
	var err error
	if rw.tw != nil {
		_, err = rw.tw.Write(rw.tbuf)
		rw.tbuf = rw.tbuf[:0]
	} else {
		_, err = rw.dw.Write(rw.dbuf)
		rw.dbuf = rw.dbuf[:0]
	}
	return err
}

func (rw *rowWriter) close() error {
	if err := rw.flushBuf(); err != nil {
		return err
	}
	if rw.tw != nil {
		return rw.tw.Close()
	}
	return rw.dw.Close()
}

// atomicFile writes a file so that it appears complete or not at all: data
// goes to a hidden temporary file in the same directory, which is synced,
// renamed into place, and the directory synced.
type atomicFile struct {
	f    *os.File
	path string
}

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
	if err := os.Rename(a.f.Name(), a.path); err != nil {
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
func writeRecords(w storeWriter, t Table, recs []*Record) error {
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

// writeParquet writes recs (sorted by sortRecords) as one Parquet file at
// a local path, atomically.
func writeParquet(path string, t Table, recs []Record) error {
	af, err := createAtomic(path)
	if err != nil {
		return fmt.Errorf("outbox: create %s: %w", path, err)
	}
	ptrs := make([]*Record, len(recs))
	for i := range recs {
		ptrs[i] = &recs[i]
	}
	if err := writeRecords(af, t, ptrs); err != nil {
		return fmt.Errorf("outbox: write %s: %w", path, err)
	}
	return nil
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

// FileWriter writes one table's records as a Parquet file in the layout
// this package writes (sorted, zstd, bloom filters and page index on the
// IDs). Tools use it to build or convert tables; records must come sorted
// by ID, oldest state first, which is what lookups and compaction rely on.
type FileWriter struct {
	rw   *rowWriter
	last string
	n    int64
}

// NewFileWriter starts a file of table t on w.
func NewFileWriter(w io.Writer, t Table) (*FileWriter, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	return &FileWriter{rw: newRowWriter(w, t, pqfile.FlushLayout)}, nil
}

// Write adds a record. It fails if the record's ID sorts before the
// previous one's or the record is invalid.
func (fw *FileWriter) Write(r Record) error {
	r.Table = fw.rw.table
	if err := r.validate(); err != nil {
		return err
	}
	if fw.n > 0 && r.ID < fw.last {
		return fmt.Errorf("outbox: record %s written after %s: records must be sorted by ID", r.ID, fw.last)
	}
	r.normalize()
	fw.last = r.ID
	fw.n++
	return fw.rw.write(&r)
}

// Close writes the footer. It does not close the underlying writer.
func (fw *FileWriter) Close() error { return fw.rw.close() }
