package pqfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go/format"
)

// CheckFooterLength checks the footer length a file states in its last
// eight bytes against the file's size. The Parquet library allocates that
// length before reading it: a few damaged bytes claiming a 4 GiB footer in
// a 700-byte file made it allocate 4 GiB, and a process reading many such
// files ran out of memory.
func CheckFooterLength(ra io.ReaderAt, size int64) (int64, error) {
	const magic = 4
	if size < 2*magic+4 {
		return 0, fmt.Errorf("%d bytes is too short for a Parquet file", size)
	}
	var tail [8]byte
	if _, err := ra.ReadAt(tail[:], size-8); err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n > size-2*magic-4 {
		return 0, fmt.Errorf("footer of %d bytes in a file of %d bytes", n, size)
	}
	return n, nil
}

// Bounds on what a footer may claim. Readers size their buffers from
// these counts, so a damaged or hostile footer claiming 10^12 rows in a
// 100-byte file would exhaust memory (which, unlike a panic, cannot be
// recovered from). Real files stay far inside them: a row takes more
// than a bit of the file, and no writer makes row groups of tens of
// millions of rows or column chunks past a gigabyte.
const (
	maxRowsPerByte     = 64
	maxRowGroupRows    = 16 << 20
	maxChunkBytes      = 1 << 30
	maxChunkValueRatio = 64 // values per row (repeated columns are refused anyway)
)

// CheckBounds refuses a footer whose counts and offsets cannot be true of
// a file of this size.
func CheckBounds(md *format.FileMetaData, size int64) error {
	if md.NumRows < 0 || md.NumRows > maxRowsPerByte*size {
		return fmt.Errorf("%d rows in %d bytes", md.NumRows, size)
	}
	for i, rg := range md.RowGroups {
		if rg.NumRows < 0 || rg.NumRows > maxRowGroupRows || rg.NumRows > maxRowsPerByte*size {
			return fmt.Errorf("row group %d: %d rows in a file of %d bytes (at most %d a row group)", i, rg.NumRows, size, maxRowGroupRows)
		}
		for j, cc := range rg.Columns {
			m := cc.MetaData
			switch {
			case m.TotalCompressedSize < 0 || m.TotalCompressedSize > size:
				return fmt.Errorf("row group %d column %d: %d compressed bytes in a file of %d", i, j, m.TotalCompressedSize, size)
			case m.TotalUncompressedSize < 0 || m.TotalUncompressedSize > maxChunkBytes:
				return fmt.Errorf("row group %d column %d: %d uncompressed bytes (at most %d)", i, j, m.TotalUncompressedSize, maxChunkBytes)
			case m.NumValues < 0 || m.NumValues > maxChunkValueRatio*max(rg.NumRows, 1):
				return fmt.Errorf("row group %d column %d: %d values for %d rows", i, j, m.NumValues, rg.NumRows)
			case m.DataPageOffset < 0 || m.DataPageOffset >= size:
				return fmt.Errorf("row group %d column %d: data page at offset %d of a file of %d bytes", i, j, m.DataPageOffset, size)
			}
		}
	}
	return nil
}
