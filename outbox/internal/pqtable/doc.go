// Package pqtable is the writer that streams sorted rows into a Parquet
// file of any of the outbox's tables, and the reader that finds, scans and
// decodes rows of such files. The tables' columns are the one list in
// internal/tableschema (Row, Column, the three Schemas), which the CLI
// reads too: the Writer builds the files' Parquet schema from it, and Open
// maps and checks a file's columns by it.
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
