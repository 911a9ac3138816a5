package pqfile

import (
	"bytes"
	"testing"

	"github.com/parquet-go/parquet-go/format"
	"github.com/stretchr/testify/require"
)

func TestCheckFooterLength(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data string
		want int64
		err  string
	}{
		{"plausible", "PAR1xxxxxxxx\x08\x00\x00\x00PAR1", 8, ""},
		{"longer than the file", "PAR1\x15\x06\x152\x152\xf0\xff\xff\xffPAR1", 0, "footer of 4294967280 bytes in a file of 18 bytes"},
		{"too short", "PAR1PAR1", 0, "8 bytes is too short for a Parquet file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n, err := CheckFooterLength(bytes.NewReader([]byte(tc.data)), int64(len(tc.data)))
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, n)
		})
	}
}

func TestCheckBounds(t *testing.T) {
	t.Parallel()
	chunk := func(values, compressed, offset int64) format.ColumnChunk {
		return format.ColumnChunk{MetaData: format.ColumnMetaData{NumValues: values, TotalCompressedSize: compressed, TotalUncompressedSize: compressed, DataPageOffset: offset}}
	}
	tests := []struct {
		name string
		md   format.FileMetaData
		err  string
	}{
		{"plausible", format.FileMetaData{NumRows: 100, RowGroups: []format.RowGroup{{NumRows: 100, Columns: []format.ColumnChunk{chunk(100, 500, 4)}}}}, ""},
		{"rows beyond the size", format.FileMetaData{NumRows: 1 << 40}, "1099511627776 rows in 1000 bytes"},
		{"chunk past the file", format.FileMetaData{NumRows: 1, RowGroups: []format.RowGroup{{NumRows: 1, Columns: []format.ColumnChunk{chunk(1, 5000, 4)}}}}, "row group 0 column 0: 5000 compressed bytes in a file of 1000"},
		{"values per row", format.FileMetaData{NumRows: 1, RowGroups: []format.RowGroup{{NumRows: 1, Columns: []format.ColumnChunk{chunk(1000, 10, 4)}}}}, "row group 0 column 0: 1000 values for 1 rows"},
		{"page offset", format.FileMetaData{NumRows: 1, RowGroups: []format.RowGroup{{NumRows: 1, Columns: []format.ColumnChunk{chunk(1, 10, 4000)}}}}, "row group 0 column 0: data page at offset 4000 of a file of 1000 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckBounds(&tc.md, 1000)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.err)
		})
	}
}
