package pqfile

import (
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
)

// Layout settings of the files the outbox writes.
const (
	// RowGroupRows bounds a row group: large enough for good compression,
	// small enough that one row group's bloom filter and page index are
	// cheap to read for a lookup.
	RowGroupRows = 128 * 1024
	// PageBufferBytes bounds an uncompressed page, the unit a lookup reads
	// and decodes for every column of a hit. Measured on 100k rows: 32 KiB
	// pages are 3% larger than 64 KiB ones for no faster lookup; 256 KiB
	// pages are 1.5% smaller but make a one-shot query (the CLI) 60% slower.
	PageBufferBytes = 64 * 1024
	// IndexBoundBytes is how much of a string the page index keeps as a
	// page's min and max. IDs share long prefixes (dispatch:run17:…), and the
	// default of 16 bytes would make every page look alike.
	IndexBoundBytes = 128
	// MetaKeyWriter marks files the outbox wrote.
	MetaKeyWriter = "ctdispatch.outbox"
	// MetaKeySorted says the rows are sorted by ID, then updated_at.
	MetaKeySorted = "ctdispatch.sorted"
)

// Compression levels. Every file uses a level that still entropy-codes
// the random half of an ID. The strongest level made a compaction output
// 1.8% smaller for 3.5 times the CPU (16 rounds of 20k dispatches folded:
// 14.41 MB in 3.1 s against 14.67 MB in 0.87 s), and compaction runs
// about log4(rounds) times over each row, so it is not worth it (ADR
// 0011). Below BestCodecMinRows a compaction output keeps the log
// conversions' bloom filters (see FlushLayout).
const BestCodecMinRows = 64 << 10

var (
	flushCodec   = NewZstdCodec(zstd.SpeedBetterCompression)
	compactCodec = flushCodec
)

// Layout is what differs between the files the outbox writes.
type Layout struct {
	Codec compress.Codec
	// IDBloomBits and CloudBloomBits size the bloom filters of the ID
	// column and of cloud_task_id, in bits per value.
	IDBloomBits, CloudBloomBits uint
}

var (
	// FlushLayout is for converted log segments: small files, many of
	// them, each covering a wide range of IDs, and asked on every dispatch
	// whether they hold a new ID: bloom filters with about 1% false
	// positives, cheap at this size.
	FlushLayout = Layout{Codec: flushCodec, IDBloomBits: 10, CloudBloomBits: 10}
	// CompactLayout is for large compaction outputs. Sorted by ID, their
	// row-group bounds and page index already find the one page an ID can
	// be on, so the ID filter only spares that page read for IDs never
	// written and a small one (about one false positive in three) is worth
	// its half byte per row. cloud_task_id is a hash with no order, the
	// filter its only pruning, and each row group it wrongly admits costs a
	// column chunk read (1% of the file): at 11 bits a row, about 0.8% false
	// positives, a lookup in 5M rows reads 1.5% of the file on average,
	// against 2.5% at 8 bits (3.3% false positives), for a file 0.9%
	// larger and still smaller than DuckDB's zstd output of the same rows.
	// 12 bits would make it larger than DuckDB's; smaller row groups would
	// read less but make every lookup decode a larger footer (see README,
	// Numbers).
	CompactLayout = Layout{Codec: compactCodec, IDBloomBits: 4, CloudBloomBits: 11}
)

// WriterOptions are the options of a file of a table whose ID column is
// idColumn, in layout l.
func WriterOptions(idColumn string, l Layout) []parquet.WriterOption {
	return []parquet.WriterOption{
		// The default zstd level stores blocks without matches raw; the
		// random half of a Cloud Tasks ID (base32) then stays at 8 bits a
		// character. The next level entropy-codes them (about 5 bits).
		parquet.Compression(l.Codec),
		parquet.MaxRowsPerRowGroup(RowGroupRows),
		parquet.PageBufferSize(PageBufferBytes),
		parquet.ColumnIndexSizeLimit(func([]string) int { return IndexBoundBytes }),
		// A hash's page bounds prune nothing; leave them out of the index.
		parquet.SkipPageBounds("payload_sha256"),
		// Page bounds live in the page index; repeating them in every page
		// header only adds bytes (a tenth of a percent of the file).
		parquet.DataPageStatistics(false),
		parquet.BloomFilters(
			parquet.SplitBlockFilter(l.IDBloomBits, idColumn),
			parquet.SplitBlockFilter(l.CloudBloomBits, "cloud_task_id"),
		),
		parquet.KeyValueMetadata(MetaKeyWriter, "1"),
		parquet.KeyValueMetadata(MetaKeySorted, "id,updated_at"),
		parquet.CreatedBy("ctdispatch", "1", ""),
	}
}
