// Package tableschema is the one list of the outbox tables' columns, which
// the Parquet writer and reader (outbox/internal/pqtable) and parquetbox's
// public column view (parquetbox.Columns, from which ctdispatch query
// derives its output) all derive from.
//
// # Rows
//
// Row is one state of a dispatch, a timer or a delivery in the columns'
// own terms: strings, integers and microsecond timestamps. RowOf and
// Row.Record convert an outbox.Record at this boundary; DueAt is written
// for timers only, the counts, HTTP status and latency for deliveries only.
//
// # Schema
//
// DispatchSchema, TimerSchema and DeliverySchema list the columns of the
// dispatch_outbox, timers and deliveries tables in file order: each
// Column's name, kind, encoding and the Row field it holds. They are the
// one list of columns: pqtable's Writer builds the files' Parquet schema
// from it, its Open maps and checks a file's columns by it, and
// parquetbox.Columns shows it to tools (ctdispatch query prints what it
// names). Adding a column means a Row field, a Column in the list, and its
// line in RowOf and Row.Record. The deliveries table
// also writes the internal ID as dispatch_id or timer_id (for joins),
// which readers ignore. Strings are plain strings (never the uuid tag,
// which parquet-go mis-encodes for string fields), dictionaries for
// columns with few distinct values, DELTA_BYTE_ARRAY for the sorted ID
// column, and TIMESTAMP(isAdjustedToUTC=true, MICROS) times.
package tableschema
