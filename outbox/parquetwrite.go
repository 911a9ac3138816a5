package outbox

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
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
	CreateCalls   int32  `parquet:"create_calls"`
	PayloadSHA256 string `parquet:"payload_sha256"`
	ProcessorUUID string `parquet:"processor_uuid,dict"`
	CreatedAt     int64  `parquet:"created_at,timestamp(microsecond:utc),delta"`
	UpdatedAt     int64  `parquet:"updated_at,timestamp(microsecond:utc),delta"`
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
	CreateCalls   int32  `parquet:"create_calls"`
	PayloadSHA256 string `parquet:"payload_sha256"`
	ProcessorUUID string `parquet:"processor_uuid,dict"`
	CreatedAt     int64  `parquet:"created_at,timestamp(microsecond:utc),delta"`
	UpdatedAt     int64  `parquet:"updated_at,timestamp(microsecond:utc),delta"`
	DueAt         int64  `parquet:"due_at,timestamp(microsecond:utc),delta"`
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

// Layout settings of the files this package writes.
const (
	// rowGroupRows bounds a row group: large enough for good compression,
	// small enough that one row group's bloom filter and page index are
	// cheap to read for a lookup.
	rowGroupRows = 128 * 1024
	// pageBufferBytes bounds an uncompressed page, the unit a lookup reads.
	pageBufferBytes = 32 * 1024
	// indexBoundBytes is how much of a string the page index keeps as a
	// page's min and max. IDs share long prefixes (dispatch:run17:…), and the
	// default of 16 bytes would make every page look alike.
	indexBoundBytes = 128
	// bloomBitsPerValue gives a false-positive rate of about 1%.
	bloomBitsPerValue = 10
	// metaKeyWriter marks files written by this package.
	metaKeyWriter = "ctdispatch.outbox"
	// metaKeySorted says the rows are sorted by ID, then updated_at.
	metaKeySorted = "ctdispatch.sorted"
)

func writerOptions(t Table) []parquet.WriterOption {
	return []parquet.WriterOption{
		parquet.Compression(&zstd.Codec{Level: zstd.SpeedDefault}),
		parquet.MaxRowsPerRowGroup(rowGroupRows),
		parquet.PageBufferSize(pageBufferBytes),
		parquet.ColumnIndexSizeLimit(func([]string) int { return indexBoundBytes }),
		parquet.BloomFilters(
			parquet.SplitBlockFilter(bloomBitsPerValue, t.idColumn()),
			parquet.SplitBlockFilter(bloomBitsPerValue, "cloud_task_id"),
		),
		parquet.KeyValueMetadata(metaKeyWriter, "1"),
		parquet.KeyValueMetadata(metaKeySorted, "id,updated_at"),
		parquet.CreatedBy("ctdispatch", "1", ""),
	}
}

// sortRecords orders records by ID, then by state (oldest first), the order
// every file written by this package has.
func sortRecords(recs []Record) {
	sort.SliceStable(recs, func(i, j int) bool {
		if recs[i].ID != recs[j].ID {
			return recs[i].ID < recs[j].ID
		}
		return newer(&recs[j], &recs[i])
	})
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

func newRowWriter(w io.Writer, t Table) *rowWriter {
	rw := &rowWriter{table: t}
	if t == TableTimers {
		rw.tw = parquet.NewGenericWriter[timerRow](w, writerOptions(t)...)
	} else {
		rw.dw = parquet.NewGenericWriter[dispatchRow](w, writerOptions(t)...)
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

// writeParquet writes recs (sorted by sortRecords) as one Parquet file at
// path, atomically.
func writeParquet(path string, t Table, recs []Record) error {
	af, err := createAtomic(path)
	if err != nil {
		return fmt.Errorf("outbox: create %s: %w", path, err)
	}
	rw := newRowWriter(af, t)
	for i := range recs {
		if err := rw.write(&recs[i]); err != nil {
			af.abort()
			return fmt.Errorf("outbox: write %s: %w", path, err)
		}
	}
	if err := rw.close(); err != nil {
		af.abort()
		return fmt.Errorf("outbox: write %s: %w", path, err)
	}
	if err := af.commit(); err != nil {
		return fmt.Errorf("outbox: commit %s: %w", path, err)
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
