// Package pqtable is the Parquet schema of the outbox's tables, the
// writer that streams sorted rows into a file of any of them, and the reader
// that finds, scans and decodes rows of such files.
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
// one list of columns: the Writer builds the files' Parquet schema from
// it, Open maps and checks a file's columns by it, and tools print and
// query what it names. Adding a column means a Row field, a Column in the
// list, and its line in RowOf and Row.Record. The deliveries table also
// writes the internal ID as dispatch_id or timer_id (for joins), which
// readers ignore. Strings are plain strings (never the uuid tag, which
// parquet-go mis-encodes for string fields), dictionaries for columns with
// few distinct values, DELTA_BYTE_ARRAY for the sorted ID column, and
// TIMESTAMP(isAdjustedToUTC=true, MICROS) times.
//
// # Writing
//
// Writer batches rows and hands them to parquet-go with the writer options
// of a pqfile.Layout; the caller writes rows already sorted by ID, then
// oldest state first.
//
// # Reading
//
// Open checks a file's footer (pqfile's bounds) and that every column the
// outbox reads has the table's types; a file that differs is refused with
// an *Error matching ErrForeign, a damaged one with ErrDamaged. A File
// finds rows by a column's value (row-group statistics, bloom filters and
// the page index keep a lookup to a few pages), scans every row, streams
// them (RowReader, for merges), reads a projection of columns, and reads
// whole rows at known positions. Panics of the Parquet library on damaged
// input are turned into errors.
package pqtable
