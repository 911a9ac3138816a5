package tableschema

import (
	"fmt"
	"reflect"
	"strings"
	"time"
	"unsafe"

	"github.com/parquet-go/parquet-go"

	"github.com/ctdispatch/ctdispatch/outbox"
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
	Kind          string // timers and deliveries only
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
	// TraceID and SpanID are the OpenTelemetry IDs the record was written
	// under, in hex, or empty (stored as NULL).
	TraceID, SpanID string
}

// RowOf returns the columns of r.
func RowOf(r *outbox.Record) Row {
	return Row{
		ID: r.ID, CloudTaskID: r.CloudTaskID, Queue: r.Queue, RunID: r.RunID, TaskKey: r.TaskKey,
		Attempt: r.Attempt, Kind: r.Kind, Status: string(r.Status), ErrorCode: r.ErrorCode,
		CreateCalls: r.CreateCalls, PayloadSHA256: r.PayloadSHA256, ProcessorUUID: r.ProcessorUUID,
		CreatedAt: Micros(r.CreatedAt), UpdatedAt: Micros(r.UpdatedAt), DueAt: Micros(r.DueAt),
		RetryCount: r.Delivery.RetryCount, ExecutionCount: r.Delivery.ExecutionCount,
		HTTPStatus: r.Delivery.HTTPStatus, LatencyMicros: r.Delivery.Latency.Microseconds(), Version: r.Version,
		TraceID: r.TraceID, SpanID: r.SpanID,
	}
}

// Record returns the record of table t that r stores, not normalized
// (a projected read fills a few fields only).
func (r *Row) Record(t outbox.Table) outbox.Record {
	return outbox.Record{
		Table: t, ID: r.ID, CloudTaskID: r.CloudTaskID, Queue: r.Queue, RunID: r.RunID, TaskKey: r.TaskKey,
		Attempt: r.Attempt, Kind: r.Kind, Status: outbox.Status(r.Status), ErrorCode: r.ErrorCode,
		CreateCalls: r.CreateCalls, PayloadSHA256: r.PayloadSHA256, ProcessorUUID: r.ProcessorUUID,
		CreatedAt: FromMicros(r.CreatedAt), UpdatedAt: FromMicros(r.UpdatedAt), DueAt: FromMicros(r.DueAt),
		Delivery: outbox.DeliveryFields{RetryCount: r.RetryCount, ExecutionCount: r.ExecutionCount,
			HTTPStatus: r.HTTPStatus, Latency: time.Duration(r.LatencyMicros) * time.Microsecond},
		Version: r.Version,
		TraceID: r.TraceID, SpanID: r.SpanID,
	}
}

// Micros returns t in microseconds since the Unix epoch, 0 for the zero
// time (which the tables store as "no time").
func Micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// FromMicros is the inverse of Micros.
func FromMicros(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMicro(v).UTC()
}

// Field identifies the Row field a column fills.
type Field uint8

// The fields of a Row that columns fill.
const (
	FieldNone Field = iota
	FieldID
	FieldCloudTaskID
	FieldQueue
	FieldRunID
	FieldTaskKey
	FieldAttempt
	FieldKind
	FieldStatus
	FieldErrorCode
	FieldCreateCalls
	FieldPayload
	FieldProcessor
	FieldCreatedAt
	FieldUpdatedAt
	FieldDueAt
	FieldRetryCount
	FieldExecutionCount
	FieldHTTPStatus
	FieldLatency
	FieldVersion
	FieldTraceID
	FieldSpanID
	numFields
)

// Kind is how a column stores its values.
type Kind uint8

// The kinds of columns.
const (
	// String is BYTE_ARRAY (STRING).
	String Kind = iota + 1
	// Int32 is INT32 (signed INTEGER).
	Int32
	// Int64 is INT64 (signed INTEGER).
	Int64
	// Timestamp is INT64 TIMESTAMP(isAdjustedToUTC=true, MICROS).
	Timestamp
)

// Encoding is how a column's values are encoded in the files the outbox
// writes.
type Encoding string

// The encodings of columns. Strings stay plain strings (never the uuid
// tag, which parquet-go mis-encodes for string fields); columns with few
// distinct values use a dictionary; the sorted ID column uses
// DELTA_BYTE_ARRAY, which stores only what differs from the previous ID.
const (
	Plain Encoding = ""
	Dict  Encoding = "dict"
	Delta Encoding = "delta"
)

// Column is one column of a table: its name, how it is stored, and the
// Row field it holds. The lists of Columns below are the tables' schema:
// the writer builds the files' schema from them, the reader maps and
// checks a file's columns by them, and tools print and query them.
type Column struct {
	// Name is the column's name in the files and in SQL.
	Name string
	// Kind and Encoding are how the values are stored.
	Kind     Kind
	Encoding Encoding
	// Field is the Row field the column is read into: FieldID for the
	// table's ID column, FieldNone for a column written for queries only
	// (derived from other fields) and never read back.
	Field Field
	// Optional columns store an empty string as NULL. They were added
	// after files were first written: a file without them reads them as
	// empty, and so does SQL over a directory that mixes both (as NULL,
	// with union_by_name).
	Optional bool

	// str, i32 and i64 point into a Row at the field of a String, Int32,
	// or Int64 and Timestamp column; derive computes a column of Field
	// FieldNone.
	str    func(*Row) *string
	i32    func(*Row) *int32
	i64    func(*Row) *int64
	derive func(*Row) string
}

func strCol(name string, enc Encoding, fld Field, at func(*Row) *string) Column {
	return Column{Name: name, Kind: String, Encoding: enc, Field: fld, str: at}
}

func int32Col(name string, fld Field, at func(*Row) *int32) Column {
	return Column{Name: name, Kind: Int32, Encoding: Dict, Field: fld, i32: at}
}

func int64Col(name string, fld Field, at func(*Row) *int64) Column {
	return Column{Name: name, Kind: Int64, Field: fld, i64: at}
}

func timeCol(name string, fld Field, at func(*Row) *int64) Column {
	return Column{Name: name, Kind: Timestamp, Field: fld, i64: at}
}

func idCol(name string) Column {
	return strCol(name, Delta, FieldID, func(r *Row) *string { return &r.ID })
}

// The columns the tables share.
var (
	colTraceID = Column{Name: "trace_id", Kind: String, Field: FieldTraceID, Optional: true, str: func(r *Row) *string { return &r.TraceID }}
	colSpanID  = Column{Name: "span_id", Kind: String, Field: FieldSpanID, Optional: true, str: func(r *Row) *string { return &r.SpanID }}

	colCloudTaskID = strCol("cloud_task_id", Plain, FieldCloudTaskID, func(r *Row) *string { return &r.CloudTaskID })
	colQueue       = strCol("queue", Dict, FieldQueue, func(r *Row) *string { return &r.Queue })
	colRunID       = strCol("run_id", Dict, FieldRunID, func(r *Row) *string { return &r.RunID })
	colTaskKey     = strCol("task_key", Dict, FieldTaskKey, func(r *Row) *string { return &r.TaskKey })
	colAttempt     = strCol("attempt", Dict, FieldAttempt, func(r *Row) *string { return &r.Attempt })
	colKind        = strCol("kind", Dict, FieldKind, func(r *Row) *string { return &r.Kind })
	colStatus      = strCol("status", Dict, FieldStatus, func(r *Row) *string { return &r.Status })
	colErrorCode   = strCol("error_code", Dict, FieldErrorCode, func(r *Row) *string { return &r.ErrorCode })
	colCreateCalls = int32Col("create_calls", FieldCreateCalls, func(r *Row) *int32 { return &r.CreateCalls })
	colPayload     = strCol("payload_sha256", Plain, FieldPayload, func(r *Row) *string { return &r.PayloadSHA256 })
	colProcessor   = strCol("processor_uuid", Dict, FieldProcessor, func(r *Row) *string { return &r.ProcessorUUID })
	colCreatedAt   = timeCol("created_at", FieldCreatedAt, func(r *Row) *int64 { return &r.CreatedAt })
	colUpdatedAt   = timeCol("updated_at", FieldUpdatedAt, func(r *Row) *int64 { return &r.UpdatedAt })
	colDueAt       = timeCol("due_at", FieldDueAt, func(r *Row) *int64 { return &r.DueAt })
	colVersion     = int64Col("version", FieldVersion, func(r *Row) *int64 { return &r.Version })
)

// The deliveries table's own columns. dispatch_id or timer_id (the other
// one empty) repeats the internal ID of the delivery ID (the internal ID,
// '#', a per-delivery suffix) under the name the other tables give it, so
// that a join reads `USING (dispatch_id)`; they are never read back.
var (
	colDeliveryDispatchID = Column{Name: "dispatch_id", Kind: String, Encoding: Delta, derive: func(r *Row) string {
		return internalIDOf(r, "dispatch")
	}}
	colDeliveryTimerID = Column{Name: "timer_id", Kind: String, Encoding: Delta, derive: func(r *Row) string {
		return internalIDOf(r, "")
	}}
	colRetryCount     = int32Col("retry_count", FieldRetryCount, func(r *Row) *int32 { return &r.RetryCount })
	colExecutionCount = int32Col("execution_count", FieldExecutionCount, func(r *Row) *int32 { return &r.ExecutionCount })
	colHTTPStatus     = int32Col("http_status", FieldHTTPStatus, func(r *Row) *int32 { return &r.HTTPStatus })
	colLatency        = int64Col("latency_us", FieldLatency, func(r *Row) *int64 { return &r.LatencyMicros })
)

// internalIDOf returns the internal ID of a delivery row when its kind is
// dispatch (for kind "dispatch") or not (for kind ""), else "".
func internalIDOf(r *Row, kind string) string {
	if (r.Kind == "dispatch") != (kind == "dispatch") {
		return ""
	}
	internal, _, _ := strings.Cut(r.ID, "#")
	return internal
}

// Schema is the columns of one table, in file order, and the name of the
// files' schema (the names of the Go types that first defined it, kept so
// that files stay byte for byte what they were).
type Schema struct {
	Table   string
	Root    string
	Columns []Column
}

// The tables' schemas.
var (
	DispatchSchema = Schema{Table: "dispatch_outbox", Root: "DispatchRow", Columns: []Column{
		idCol("dispatch_id"), colCloudTaskID, colQueue, colRunID, colTaskKey, colAttempt, colStatus,
		colErrorCode, colCreateCalls, colPayload, colProcessor, colCreatedAt, colUpdatedAt, colVersion,
		colTraceID, colSpanID,
	}}
	TimerSchema = Schema{Table: TableTimers, Root: "TimerRow", Columns: []Column{
		idCol("timer_id"), colCloudTaskID, colQueue, colRunID, colTaskKey, colAttempt, colKind, colStatus,
		colErrorCode, colCreateCalls, colPayload, colProcessor, colCreatedAt, colUpdatedAt, colDueAt, colVersion,
		colTraceID, colSpanID,
	}}
	DeliverySchema = Schema{Table: TableDeliveries, Root: "DeliveryRow", Columns: []Column{
		idCol("delivery_id"), colDeliveryDispatchID, colDeliveryTimerID, colCloudTaskID, colQueue, colRunID,
		colTaskKey, colAttempt, colKind, colStatus, colRetryCount, colExecutionCount, colHTTPStatus, colLatency,
		colProcessor, colCreatedAt, colUpdatedAt, colVersion, colTraceID, colSpanID,
	}}
)

// The table names besides dispatch_outbox.
const (
	TableTimers     = "timers"
	TableDeliveries = "deliveries"
)

// SchemaOf returns the schema of the named table (timers, deliveries, or
// else dispatch_outbox).
func SchemaOf(table string) Schema {
	switch table {
	case TableTimers:
		return TimerSchema
	case TableDeliveries:
		return DeliverySchema
	}
	return DispatchSchema
}

// Parquet returns the files' Parquet schema. It is built as parquet-go
// builds one from a struct with a tagged field per column, which is how
// the files were first written.
func (s Schema) Parquet() *parquet.Schema {
	fields := make([]reflect.StructField, len(s.Columns))
	for i, c := range s.Columns {
		var typ reflect.Type
		tag := c.Name
		switch c.Kind {
		case String:
			typ = reflect.TypeFor[string]()
		case Int32:
			typ = reflect.TypeFor[int32]()
		case Int64:
			typ = reflect.TypeFor[int64]()
		case Timestamp:
			typ = reflect.TypeFor[int64]()
			tag += ",timestamp(microsecond:utc)"
		}
		if c.Encoding != Plain {
			tag += "," + string(c.Encoding)
		}
		if c.Optional {
			tag += ",optional"
		}
		fields[i] = reflect.StructField{Name: fmt.Sprintf("C%d", i), Type: typ, Tag: reflect.StructTag(`parquet:"` + tag + `"`)}
	}
	model := reflect.Zero(reflect.StructOf(fields)).Interface()
	return parquet.NewSchema(s.Root, parquet.SchemaOf(model))
}

// Value returns the column's value in r, as leaf column ci.
func (c *Column) Value(r *Row, ci int) parquet.Value {
	var v parquet.Value
	switch {
	case c.Optional && *c.str(r) == "":
		return parquet.NullValue().Level(0, 0, ci)
	case c.Optional:
		return parquet.ByteArrayValue(unsafeBytes(*c.str(r))).Level(0, 1, ci)
	case c.derive != nil:
		v = parquet.ByteArrayValue(unsafeBytes(c.derive(r)))
	case c.str != nil:
		v = parquet.ByteArrayValue(unsafeBytes(*c.str(r)))
	case c.i32 != nil:
		v = parquet.Int32Value(*c.i32(r))
	default:
		v = parquet.Int64Value(*c.i64(r))
	}
	return v.Level(0, 0, ci)
}

// Set stores v, read from a column of c's kind, in r; div and mul turn a
// Timestamp into microseconds.
func (c *Column) Set(r *Row, v parquet.Value, div, mul int64) {
	switch {
	case c.str != nil:
		*c.str(r) = string(v.ByteArray())
	case c.i32 != nil:
		*c.i32(r) = int32(intValue(v))
	case c.Kind == Timestamp:
		*c.i64(r) = v.Int64() / div * mul
	case c.i64 != nil:
		*c.i64(r) = intValue(v)
	}
}

// Dictionary reports whether the column is a string column with few
// distinct values (dictionary-encoded in the outbox's layout).
func (c *Column) Dictionary() bool { return c.Kind == String && c.Encoding == Dict }

// Str returns the value of a String column in r (derived or stored).
func (c *Column) Str(r *Row) string {
	if c.derive != nil {
		return c.derive(r)
	}
	return *c.str(r)
}

// Int returns the value of an Int32, Int64 or Timestamp column in r
// (microseconds for a Timestamp).
func (c *Column) Int(r *Row) int64 {
	if c.i32 != nil {
		return int64(*c.i32(r))
	}
	return *c.i64(r)
}

// byField holds, for each Field, the column read into it (the ID column
// of any table for FieldID), and byName the readable columns of every
// table by name. A file of one table may carry another's columns (a
// dispatch file with due_at): they are read as they always were.
var (
	byField [numFields]*Column
	byName  = map[string]*Column{}
)

func init() {
	for _, s := range []Schema{DispatchSchema, TimerSchema, DeliverySchema} {
		for i := range s.Columns {
			c := &s.Columns[i]
			if c.Field == FieldNone {
				continue
			}
			byField[c.Field] = c
			if c.Field != FieldID {
				byName[c.Name] = c
			}
		}
	}
}

// ByField returns the column read into fld (the ID column of any table for
// FieldID), nil for FieldNone.
func ByField(fld Field) *Column { return byField[fld] }

// ByName returns the column of any table named name that is read back,
// nil for another name (an ID column's name included: see ByField).
func ByName(name string) *Column { return byName[name] }

// StringField returns the string field fld of r.
func (r *Row) StringField(fld Field) *string { return byField[fld].str(r) }

// unsafeBytes returns the bytes of s without copying them; parquet-go
// copies a value's bytes into its buffers when the row is written.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// intValue returns an INT32 or INT64 value as an int64 (readers allow
// either for integer columns), 0 for any other kind.
func intValue(v parquet.Value) int64 {
	switch v.Kind() {
	case parquet.Int32:
		return int64(v.Int32())
	case parquet.Int64:
		return v.Int64()
	}
	return 0
}
