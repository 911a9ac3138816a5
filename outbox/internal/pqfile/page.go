package pqfile

import (
	"errors"
	"io"

	"github.com/parquet-go/parquet-go"
)

// ReadPage reads the next page of a column chunk, whose first value is
// that of row first, and calls fn with each value and its row until fn
// returns false or the page ends. It returns the row after the page and
// io.EOF when there is no page left. This is the one loop over page
// values that lookups, whole-row reads and projected scans share; it hands
// the page back to the library's pool, so fn must copy what it keeps.
func ReadPage(pages parquet.Pages, first int64, vals []parquet.Value, fn func(row int64, v parquet.Value) bool) (end int64, err error) {
	page, err := pages.ReadPage()
	if err != nil {
		return first, err
	}
	defer parquet.Release(page)
	end = first + page.NumRows()
	vr := page.Values()
	row := first
	for {
		n, err := vr.ReadValues(vals)
		for _, v := range vals[:n] {
			if !fn(row, v) {
				return end, nil
			}
			row++
		}
		if n == 0 || errors.Is(err, io.EOF) {
			if row == first {
				return end, io.ErrUnexpectedEOF // a page without values would loop forever
			}
			return end, nil
		}
		if err != nil {
			return end, err
		}
	}
}
