package pqtable

import (
	"io"

	"github.com/parquet-go/parquet-go"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqfile"
)

// Row is one state of a dispatch or a timer as its columns store it.
type Row struct {
	ID            string
	CloudTaskID   string
	Queue         string
	RunID         string
	TaskKey       string
	Attempt       string
	Kind          string // timers only
	Status        string
	ErrorCode     string
	CreateCalls   int32
	PayloadSHA256 string
	ProcessorUUID string
	// CreatedAt, UpdatedAt and DueAt (timers only) are microseconds since
	// the Unix epoch, UTC.
	CreatedAt, UpdatedAt, DueAt int64
}

// DispatchRow is the Parquet layout of the dispatch_outbox table. Strings
// stay plain strings (never the uuid tag, which parquet-go mis-encodes for
// string fields); columns with few distinct values are dictionary-encoded;
// the sorted ID column uses DELTA_BYTE_ARRAY, which stores only what differs
// from the previous ID; times are microsecond TIMESTAMPs adjusted to UTC.
type DispatchRow struct {
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

// TimerRow is the Parquet layout of the timers table: the dispatch columns
// plus kind and due_at.
type TimerRow struct {
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

func (r *Row) dispatch() DispatchRow {
	return DispatchRow{
		DispatchID: r.ID, CloudTaskID: r.CloudTaskID, Queue: r.Queue, RunID: r.RunID, TaskKey: r.TaskKey,
		Attempt: r.Attempt, Status: r.Status, ErrorCode: r.ErrorCode, CreateCalls: r.CreateCalls,
		PayloadSHA256: r.PayloadSHA256, ProcessorUUID: r.ProcessorUUID,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

func (r *Row) timer() TimerRow {
	return TimerRow{
		TimerID: r.ID, CloudTaskID: r.CloudTaskID, Queue: r.Queue, RunID: r.RunID, TaskKey: r.TaskKey,
		Attempt: r.Attempt, Kind: r.Kind, Status: r.Status, ErrorCode: r.ErrorCode,
		CreateCalls: r.CreateCalls, PayloadSHA256: r.PayloadSHA256, ProcessorUUID: r.ProcessorUUID,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, DueAt: r.DueAt,
	}
}

// Writer streams sorted rows of one table into a Parquet file.
type Writer struct {
	dw   *parquet.GenericWriter[DispatchRow]
	tw   *parquet.GenericWriter[TimerRow]
	dbuf []DispatchRow
	tbuf []TimerRow
}

// NewWriter returns a writer of the timers table when timers is set, else
// of the dispatch_outbox table, whose ID column is idColumn, in layout l.
func NewWriter(w io.Writer, timers bool, idColumn string, l pqfile.Layout) *Writer {
	if timers {
		return &Writer{tw: parquet.NewGenericWriter[TimerRow](w, pqfile.WriterOptions(idColumn, l)...)}
	}
	return &Writer{dw: parquet.NewGenericWriter[DispatchRow](w, pqfile.WriterOptions(idColumn, l)...)}
}

// writeBatch is how many rows are handed to parquet-go at once.
const writeBatch = 1024

// Write adds r after the rows written before it.
func (w *Writer) Write(r *Row) error {
	if w.tw != nil {
		w.tbuf = append(w.tbuf, r.timer())
		if len(w.tbuf) >= writeBatch {
			return w.flushBuf()
		}
		return nil
	}
	w.dbuf = append(w.dbuf, r.dispatch())
	if len(w.dbuf) >= writeBatch {
		return w.flushBuf()
	}
	return nil
}

func (w *Writer) flushBuf() error {
	var err error
	if w.tw != nil {
		_, err = w.tw.Write(w.tbuf)
		w.tbuf = w.tbuf[:0]
	} else {
		_, err = w.dw.Write(w.dbuf)
		w.dbuf = w.dbuf[:0]
	}
	return err
}

// Close writes the rows still buffered and the file's footer.
func (w *Writer) Close() error {
	if err := w.flushBuf(); err != nil {
		return err
	}
	if w.tw != nil {
		return w.tw.Close()
	}
	return w.dw.Close()
}
