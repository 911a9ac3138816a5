// Package pqfile holds what the outbox's Parquet files need that is not
// about records: the layout they are written in (compression, row groups,
// bloom filters, page index), the checks a file's footer must pass before
// any reader trusts its counts, and the one loop over a page's values.
//
// # Checks
//
// The Parquet library sizes buffers from what a footer states; a damaged
// or hostile file stating a 4 GiB footer or 10^12 rows in a few hundred
// bytes would exhaust memory, which no recover catches. CheckFooterLength
// and CheckBounds refuse such files first.
//
// # Layout
//
// FlushLayout is for converted log segments, CompactLayout for large
// compaction outputs; WriterOptions turns one into parquet-go options.
package pqfile
