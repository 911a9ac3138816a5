package pqtable

import (
	"io"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqfile"
)

// Row is one state of a dispatch, a timer or a delivery as its columns
// store it.
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
	// RetryCount, ExecutionCount, HTTPStatus and LatencyMicros are stored
	// by the deliveries table only.
	RetryCount, ExecutionCount, HTTPStatus int32
	LatencyMicros                          int64
	// Version is the ID's version the row sets (0 in files written before
	// versions existed, which have no version column).
	Version int64
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
	Version       int64  `parquet:"version"`
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
	Version       int64  `parquet:"version"`
}

// DeliveryRow is the Parquet layout of the deliveries table: one row per
// state of one delivery a worker received. delivery_id (the internal ID,
// '#', a per-delivery suffix) is the sorted ID column, so an ID's
// deliveries lie together; dispatch_id or timer_id (the other one empty)
// repeats the internal ID under the name the other tables give it, so
// that a join reads `USING (dispatch_id)`. They are written from the
// delivery ID and never read back.
type DeliveryRow struct {
	DeliveryID     string `parquet:"delivery_id,delta"`
	DispatchID     string `parquet:"dispatch_id,delta"`
	TimerID        string `parquet:"timer_id,delta"`
	CloudTaskID    string `parquet:"cloud_task_id"`
	Queue          string `parquet:"queue,dict"`
	RunID          string `parquet:"run_id,dict"`
	TaskKey        string `parquet:"task_key,dict"`
	Attempt        string `parquet:"attempt,dict"`
	Kind           string `parquet:"kind,dict"`
	Status         string `parquet:"status,dict"`
	RetryCount     int32  `parquet:"retry_count,dict"`
	ExecutionCount int32  `parquet:"execution_count,dict"`
	HTTPStatus     int32  `parquet:"http_status,dict"`
	LatencyMicros  int64  `parquet:"latency_us"`
	ProcessorUUID  string `parquet:"processor_uuid,dict"`
	CreatedAt      int64  `parquet:"created_at,timestamp(microsecond:utc)"`
	UpdatedAt      int64  `parquet:"updated_at,timestamp(microsecond:utc)"`
	Version        int64  `parquet:"version"`
}

func (r *Row) delivery() DeliveryRow {
	d := DeliveryRow{
		DeliveryID: r.ID, CloudTaskID: r.CloudTaskID, Queue: r.Queue, RunID: r.RunID, TaskKey: r.TaskKey,
		Attempt: r.Attempt, Kind: r.Kind, Status: r.Status, RetryCount: r.RetryCount,
		ExecutionCount: r.ExecutionCount, HTTPStatus: r.HTTPStatus, LatencyMicros: r.LatencyMicros,
		ProcessorUUID: r.ProcessorUUID, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Version: r.Version,
	}
	internal, _, _ := strings.Cut(r.ID, "#")
	if r.Kind == "dispatch" {
		d.DispatchID = internal
	} else {
		d.TimerID = internal
	}
	return d
}

func (r *Row) dispatch() DispatchRow {
	return DispatchRow{
		DispatchID: r.ID, CloudTaskID: r.CloudTaskID, Queue: r.Queue, RunID: r.RunID, TaskKey: r.TaskKey,
		Attempt: r.Attempt, Status: r.Status, ErrorCode: r.ErrorCode, CreateCalls: r.CreateCalls,
		PayloadSHA256: r.PayloadSHA256, ProcessorUUID: r.ProcessorUUID,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Version: r.Version,
	}
}

func (r *Row) timer() TimerRow {
	return TimerRow{
		TimerID: r.ID, CloudTaskID: r.CloudTaskID, Queue: r.Queue, RunID: r.RunID, TaskKey: r.TaskKey,
		Attempt: r.Attempt, Kind: r.Kind, Status: r.Status, ErrorCode: r.ErrorCode,
		CreateCalls: r.CreateCalls, PayloadSHA256: r.PayloadSHA256, ProcessorUUID: r.ProcessorUUID,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, DueAt: r.DueAt, Version: r.Version,
	}
}

// Writer streams sorted rows of one table into a Parquet file.
type Writer struct {
	dw    *parquet.GenericWriter[DispatchRow]
	tw    *parquet.GenericWriter[TimerRow]
	vw    *parquet.GenericWriter[DeliveryRow]
	dbuf  []DispatchRow
	tbuf  []TimerRow
	vbuf  []DeliveryRow
	table string
}

// The table names NewWriter knows besides dispatch_outbox.
const (
	TableTimers     = "timers"
	TableDeliveries = "deliveries"
)

// NewWriter returns a writer of the named table (timers, deliveries, or
// else dispatch_outbox), whose ID column is idColumn, in layout l.
func NewWriter(w io.Writer, table, idColumn string, l pqfile.Layout) *Writer {
	switch table {
	case TableTimers:
		return &Writer{tw: parquet.NewGenericWriter[TimerRow](w, pqfile.WriterOptions(idColumn, l)...), table: table}
	case TableDeliveries:
		return &Writer{vw: parquet.NewGenericWriter[DeliveryRow](w, pqfile.WriterOptions(idColumn, l)...), table: table}
	}
	return &Writer{dw: parquet.NewGenericWriter[DispatchRow](w, pqfile.WriterOptions(idColumn, l)...), table: table}
}

// writeBatch is how many rows are handed to parquet-go at once.
const writeBatch = 1024

// Write adds r after the rows written before it.
func (w *Writer) Write(r *Row) error {
	if w.vw != nil {
		w.vbuf = append(w.vbuf, r.delivery())
		if len(w.vbuf) >= writeBatch {
			return w.flushBuf()
		}
		return nil
	}
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
	switch {
	case w.vw != nil:
		_, err = w.vw.Write(w.vbuf)
		w.vbuf = w.vbuf[:0]
	case w.tw != nil:
		_, err = w.tw.Write(w.tbuf)
		w.tbuf = w.tbuf[:0]
	default:
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
	switch {
	case w.vw != nil:
		return w.vw.Close()
	case w.tw != nil:
		return w.tw.Close()
	}
	return w.dw.Close()
}
