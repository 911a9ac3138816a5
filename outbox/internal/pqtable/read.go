package pqtable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/ctdispatch/ctdispatch/outbox/internal/tableschema"
	"io"
	"slices"
	"sync"
	"unsafe"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/bloom"
	"github.com/parquet-go/parquet-go/format"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqfile"
)

// Sentinel errors a File's errors match with errors.Is.
var (
	// ErrDamaged marks a file that cannot be read as the Parquet file it
	// claims to be.
	ErrDamaged = errors.New("outbox: damaged file")
	// ErrForeign marks a readable Parquet file that is not an outbox table.
	ErrForeign = errors.New("outbox: foreign file")
)

// Error says why a file could not be opened or read. It unwraps to the
// cause, which matches ErrForeign for a file of another layout and
// ErrDamaged (or the reader's own error) otherwise.
type Error struct {
	// Reason says what is wrong, in words.
	Reason string
	// Err is the cause.
	Err error
}

// Error returns the reason and the cause.
func (e *Error) Error() string { return e.Reason + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// column describes how one leaf column of a file maps onto a tableschema.Row.
type column struct {
	field tableschema.Field
	spec  *tableschema.Column // nil for a column the outbox does not read
	// timeDiv and timeMul turn a stored time into microseconds: a divisor
	// (nanoseconds) or a multiplier (milliseconds).
	timeDiv, timeMul int64
}

// File is one Parquet file of a table, opened once: the footer, the column
// mapping, and (when cached) the bloom filters of the ID column.
type File struct {
	pf    *parquet.File
	cols  []column // by leaf index
	byFld map[tableschema.Field]int
	ours  bool
	// footerLen is the footer's stored size, for a cache's budget.
	footerLen int64

	mu     sync.Mutex
	blooms map[int]bloom.SplitBlockFilter // row group -> ID bloom filter bits
}

// Open opens and checks a Parquet file of the table named table, whose ID
// column is idColumn. Every column the outbox reads must have the
// physical and logical type of the table's schema (see checkColumn); a
// file that differs is foreign, since decoding it as the outbox's types
// would misread it or crash. Every failure is an *Error.
func Open(ra io.ReaderAt, size int64, table, idColumn string) (p *File, err error) {
	defer recoverRead(&err)
	footerLen, err := pqfile.CheckFooterLength(ra, size)
	if err != nil {
		return nil, &Error{Reason: "not a readable Parquet file", Err: fmt.Errorf("%w: %v", ErrDamaged, err)}
	}
	pf, err := parquet.OpenFile(ra, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, &Error{Reason: "not a readable Parquet file", Err: err}
	}
	if err := pqfile.CheckBounds(pf.Metadata(), size); err != nil {
		return nil, &Error{Reason: "implausible Parquet footer", Err: fmt.Errorf("%w: %v", ErrDamaged, err)}
	}
	p = &File{pf: pf, byFld: map[tableschema.Field]int{}, footerLen: footerLen}
	leaves := pf.Schema().Columns()
	p.cols = make([]column, len(leaves))
	for i, lp := range leaves {
		if len(lp) != 1 {
			continue // nested columns are not part of the outbox layout
		}
		name := lp[0]
		spec := tableschema.ByName(name)
		if name == idColumn {
			spec = tableschema.ByField(tableschema.FieldID)
		}
		if spec == nil {
			continue
		}
		leaf, _ := pf.Schema().Lookup(lp...)
		if err := checkColumn(spec.Kind, leaf.Node); err != nil {
			return nil, &Error{Reason: fmt.Sprintf("column %s is %s; %v", name, describeNode(leaf.Node), err), Err: ErrForeign}
		}
		c := column{field: spec.Field, spec: spec, timeDiv: 1, timeMul: 1}
		if spec.Kind == tableschema.Timestamp {
			c.timeDiv, c.timeMul = timeUnit(leaf.Node.Type())
		}
		p.cols[i] = c
		p.byFld[spec.Field] = i
	}
	if _, ok := p.byFld[tableschema.FieldID]; !ok {
		return nil, &Error{Reason: fmt.Sprintf("no column %s: not a %s file", idColumn, table), Err: ErrForeign}
	}
	_, p.ours = pf.Lookup(pqfile.MetaKeyWriter)
	return p, nil
}

// recoverRead turns a panic inside the Parquet library into an *Error.
// The library trusts the lengths and offsets a file states, and some
// damaged files make it index out of range or allocate absurdly; such a
// file must be skipped like any other damaged one, not end the process.
func recoverRead(err *error) {
	if v := recover(); v != nil {
		*err = &Error{Reason: "not a readable Parquet file", Err: fmt.Errorf("%w: reader panicked: %v", ErrDamaged, v)}
	}
}

// checkColumn checks that a leaf column holds the type the outbox reads
// into a column of kind k: strings are BYTE_ARRAY (plain, STRING or ENUM),
// integers are INT32 or INT64 (plain or a signed INTEGER), times are INT64
// (plain or TIMESTAMP of any unit). No column may repeat.
func checkColumn(k tableschema.Kind, n parquet.Node) error {
	if n.Repeated() {
		return errors.New("a repeated column; want one value per row")
	}
	typ := n.Type()
	var lt any
	if l := typ.LogicalType(); l != nil {
		lt = l.Value
	}
	switch k {
	case tableschema.Int32, tableschema.Int64:
		if typ.Kind() != parquet.Int32 && typ.Kind() != parquet.Int64 {
			return errors.New("want INT32 or INT64")
		}
		if it, ok := lt.(*format.IntType); lt != nil && (!ok || !it.IsSigned) {
			return errors.New("want a signed integer")
		}
	case tableschema.Timestamp:
		if typ.Kind() != parquet.Int64 {
			return errors.New("want INT64 (TIMESTAMP)")
		}
		if _, ok := lt.(*format.TimestampType); lt != nil && !ok {
			return errors.New("want TIMESTAMP")
		}
	default:
		if typ.Kind() != parquet.ByteArray {
			return errors.New("want BYTE_ARRAY (STRING)")
		}
		switch lt.(type) {
		case nil, *format.StringType, *format.EnumType:
		default:
			return errors.New("want STRING")
		}
	}
	return nil
}

// describeNode names a column's type for messages: physical, then logical.
func describeNode(n parquet.Node) string {
	typ := n.Type()
	s := typ.Kind().String()
	if l := typ.LogicalType(); l != nil && l.Value != nil {
		s += " (" + l.String() + ")"
	}
	if n.Repeated() {
		s = "repeated " + s
	}
	return s
}

// timeUnit returns how to turn a stored timestamp (checked by checkColumn)
// into microseconds.
func timeUnit(t parquet.Type) (div, mul int64) {
	if lt := t.LogicalType(); lt != nil {
		if ts, ok := lt.Value.(*format.TimestampType); ok {
			switch ts.Unit.Value.(type) {
			case *format.MilliSeconds:
				return 1, 1000
			case *format.NanoSeconds:
				return 1000, 1
			}
		}
	}
	return 1, 1 // microseconds, as the outbox writes
}

// Ours reports whether the outbox wrote the file (sorted, its layout).
func (p *File) Ours() bool { return p.ours }

// HasSchemaOf reports whether the file's columns are the named table's
// current columns, by name and in file order: a file written before a
// column was added has fewer.
func (p *File) HasSchemaOf(table string) bool {
	want := tableschema.SchemaOf(table).Columns
	leaves := p.pf.Schema().Columns()
	if len(leaves) != len(want) {
		return false
	}
	for i, lp := range leaves {
		if len(lp) != 1 || lp[0] != want[i].Name {
			return false
		}
	}
	return true
}

// NumRows is the number of rows the footer states.
func (p *File) NumRows() int64 { return p.pf.NumRows() }

// NumRowGroups is the number of row groups.
func (p *File) NumRowGroups() int { return len(p.pf.RowGroups()) }

// RowGroupRows returns the number of rows of each row group.
func (p *File) RowGroupRows() []int64 {
	groups := p.pf.RowGroups()
	out := make([]int64, len(groups))
	for i, rg := range groups {
		out[i] = rg.NumRows()
	}
	return out
}

// CachedBytes estimates the memory the open file holds: its footer (as
// stored; decoded it is larger, in proportion) and the bloom filters
// cached for it.
func (p *File) CachedBytes() int64 {
	n := p.footerLen
	p.mu.Lock()
	for _, b := range p.blooms {
		n += int64(len(b)) * int64(unsafe.Sizeof(bloom.Block{}))
	}
	p.mu.Unlock()
	return n
}

// set stores the value of leaf column ci in the field it maps to.
func (p *File) set(r *tableschema.Row, ci int, v parquet.Value) {
	if ci < 0 || ci >= len(p.cols) || v.IsNull() {
		return
	}
	if c := &p.cols[ci]; c.spec != nil {
		c.spec.Set(r, v, c.timeDiv, c.timeMul)
	}
}

// Scan calls fn for every row of the file, in file order.
func (p *File) Scan(fn func(*tableschema.Row) error) (err error) {
	defer recoverRead(&err)
	rr := p.NewRowReader(nil)
	defer rr.Close()
	for {
		r, err := rr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
}

// RowReader reads a file's rows in file order, row group by row group.
type RowReader struct {
	f     *File
	rg    int
	rows  parquet.Rows
	buf   []parquet.Row
	n, i  int
	count func(int)
	// intern holds the values of the dictionary-encoded columns seen so
	// far, so that a row allocates only its unique strings (the IDs and
	// the payload hash): a compaction reads millions of rows, and a
	// string per column and row was most of its garbage.
	intern map[string]string
}

// maxInterned bounds a RowReader's interned strings; past it they are
// forgotten and collected again.
const maxInterned = 1 << 16

// NewRowReader returns a reader of the file's rows; count, when not nil,
// is told how many rows each batch read holds.
func (p *File) NewRowReader(count func(int)) *RowReader {
	return &RowReader{f: p, buf: make([]parquet.Row, 256), count: count, intern: map[string]string{}}
}

// Next returns the next row, or io.EOF after the last.
func (s *RowReader) Next() (_ tableschema.Row, err error) {
	defer recoverRead(&err)
	for s.i >= s.n {
		if s.rows == nil {
			groups := s.f.pf.RowGroups()
			if s.rg >= len(groups) {
				return tableschema.Row{}, io.EOF
			}
			s.rows = groups[s.rg].Rows()
			s.rg++
		}
		n, err := s.rows.ReadRows(s.buf)
		s.n, s.i = n, 0
		if s.count != nil && n > 0 {
			s.count(n)
		}
		if errors.Is(err, io.EOF) {
			s.rows.Close()
			s.rows = nil
		} else if err != nil {
			s.rows.Close()
			s.rows = nil
			return tableschema.Row{}, fail("reading rows", err)
		}
	}
	s.i++
	var r tableschema.Row
	for _, v := range s.buf[s.i-1] {
		ci := v.Column()
		if ci >= 0 && ci < len(s.f.cols) && !v.IsNull() && s.f.cols[ci].spec != nil && s.f.cols[ci].spec.Dictionary() {
			*r.StringField(s.f.cols[ci].field) = s.internBytes(v.ByteArray())
			continue
		}
		s.f.set(&r, ci, v)
	}
	return r, nil
}

// internBytes returns b as a string, shared with the earlier values equal
// to it.
func (s *RowReader) internBytes(b []byte) string {
	if v, ok := s.intern[string(b)]; ok {
		return v
	}
	if len(s.intern) >= maxInterned {
		clear(s.intern)
	}
	v := string(b)
	s.intern[v] = v
	return v
}

// Close releases the row group being read.
func (s *RowReader) Close() {
	if s.rows != nil {
		s.rows.Close()
		s.rows = nil
	}
}

// fail wraps a reading error in an *Error saying what was being done.
func fail(what string, err error) error {
	var pe *Error
	if errors.As(err, &pe) {
		return err
	}
	return &Error{Reason: what, Err: err}
}

// FindOptions narrow a Find.
type FindOptions struct {
	// CacheBloom keeps the ID column's bloom filters in memory, for a
	// process that asks about new IDs all the time.
	CacheBloom bool
	// Admit, when set, limits the search to the row groups it accepts,
	// which a manifest found to pass their bloom filters already: these
	// are not checked again.
	Admit func(rg int) bool
	// Unique says the file holds at most one row per value (a compacted
	// file holds one state per ID, and an ID has one cloud_task_id), so
	// the search ends at the first match instead of reading the rest of
	// the column chunk.
	Unique bool
	// Fields, when not nil, are the only fields of the rows returned
	// that are filled (besides the searched one): the other columns are
	// not read, which spares decoding a page of each.
	Fields []tableschema.Field
}

// Find returns every row whose column fld equals value. It skips row
// groups by their statistics and bloom filters, and pages by the page
// index, so a hit reads a few pages and a miss usually reads nothing
// beyond the footer.
func (p *File) Find(fld tableschema.Field, value string, o FindOptions) (_ []tableschema.Row, err error) {
	defer recoverRead(&err)
	ci, ok := p.byFld[fld]
	if !ok {
		return nil, nil
	}
	want := []byte(value)
	var out []tableschema.Row
	for gi, rg := range p.pf.RowGroups() {
		if o.Admit != nil && !o.Admit(gi) {
			continue
		}
		cc, ok := rg.ColumnChunks()[ci].(*parquet.FileColumnChunk)
		if !ok || cc.Type().Kind() != parquet.ByteArray {
			continue
		}
		if min, max, ok := cc.Bounds(); ok && (bytes.Compare(want, min.ByteArray()) < 0 || bytes.Compare(want, max.ByteArray()) > 0) {
			continue
		}
		if o.Admit == nil {
			maybe, err := p.bloomCheck(gi, cc, fld, want, o.CacheBloom)
			if err != nil {
				return nil, err
			}
			if !maybe {
				continue
			}
		}
		rowsIdx, err := p.matchRows(cc, rg.NumRows(), want, o.Unique)
		if err != nil {
			return nil, err
		}
		if len(rowsIdx) == 0 {
			continue
		}
		// The searched column's value is known: its page need not be
		// read and decoded a second time.
		rows, err := p.readRows(rg, rowsIdx, func(c int) bool {
			return c != ci && (o.Fields == nil || slices.Contains(o.Fields, p.cols[c].field))
		})
		if err != nil {
			return nil, err
		}
		for i := range rows {
			*rows[i].StringField(fld) = value
		}
		if o.Unique {
			return rows, nil
		}
		if out == nil {
			out = rows // usually the only row group that matches
			continue
		}
		out = append(out, rows...)
	}
	return out, nil
}

// bloomCheck reports whether the row group may contain value.
func (p *File) bloomCheck(gi int, cc *parquet.FileColumnChunk, fld tableschema.Field, want []byte, cacheBloom bool) (bool, error) {
	if cacheBloom && fld == tableschema.FieldID {
		p.mu.Lock()
		defer p.mu.Unlock()
		f, ok := p.blooms[gi]
		if !ok {
			bf, err := cc.BloomFilterFrom(p.pf)
			switch {
			case errors.Is(err, parquet.ErrMissingBloomFilter):
			case err != nil:
				return false, fail("reading bloom filter", err)
			case bf != nil:
				bits := make([]byte, bf.Size())
				if _, err := bf.ReadAt(bits, 0); err != nil && !errors.Is(err, io.EOF) {
					return false, fail("reading bloom filter", err)
				}
				f = bloom.MakeSplitBlockFilter(bits)
			}
			if p.blooms == nil {
				p.blooms = map[int]bloom.SplitBlockFilter{}
			}
			p.blooms[gi] = f
		}
		if f == nil {
			return true, nil
		}
		return f.Check(bloom.XXH64{}.Sum64(want)), nil
	}
	bf := cc.BloomFilter()
	if bf == nil {
		return true, nil
	}
	ok, err := bf.Check(parquet.ByteArrayValue(want))
	if err != nil {
		return false, fail("reading bloom filter", err)
	}
	return ok, nil
}

// matchRows returns the indexes (within the row group) of the rows whose
// value in the chunk equals want, reading only pages whose page-index
// bounds admit it; with unique, it stops at the first.
func (p *File) matchRows(cc *parquet.FileColumnChunk, numRows int64, want []byte, unique bool) ([]int64, error) {
	type span struct{ from, to int64 }
	spans := []span{{0, numRows}}
	if ci, err := cc.ColumnIndex(); err == nil {
		if oi, err := cc.OffsetIndex(); err == nil && oi.NumPages() == ci.NumPages() {
			spans = spans[:0]
			for i := 0; i < ci.NumPages(); i++ {
				if ci.NullPage(i) {
					continue
				}
				if bytes.Compare(want, ci.MinValue(i).ByteArray()) < 0 || bytes.Compare(want, ci.MaxValue(i).ByteArray()) > 0 {
					continue
				}
				end := numRows
				if i+1 < oi.NumPages() {
					end = oi.FirstRowIndex(i + 1)
				}
				from := oi.FirstRowIndex(i)
				if n := len(spans); n > 0 && spans[n-1].to == from {
					spans[n-1].to = end
				} else {
					spans = append(spans, span{from, end})
				}
			}
		}
	}
	var hits []int64
	vals := make([]parquet.Value, 512)
	for _, s := range spans {
		pages := cc.Pages()
		if err := pages.SeekToRow(s.from); err != nil {
			pages.Close()
			return nil, fail("seeking in a column", err)
		}
		for row := s.from; row < s.to; {
			end, err := pqfile.ReadPage(pages, row, vals, func(r int64, v parquet.Value) bool {
				if r >= s.to {
					return false
				}
				if !v.IsNull() && bytes.Equal(v.ByteArray(), want) {
					hits = append(hits, r)
					return !unique
				}
				return true
			})
			if errors.Is(err, io.EOF) || (unique && len(hits) > 0) {
				break
			}
			if err != nil {
				pages.Close()
				return nil, fail("reading a page", err)
			}
			row = end
		}
		pages.Close()
	}
	return hits, nil
}

// ReadRows reads whole rows at the given (ascending) indexes of row group
// rg.
func (p *File) ReadRows(rg int, idx []int64) (_ []tableschema.Row, err error) {
	defer recoverRead(&err)
	groups := p.pf.RowGroups()
	if rg < 0 || rg >= len(groups) {
		return nil, &Error{Reason: "reading rows", Err: fmt.Errorf("%w: no row group %d of %d", ErrDamaged, rg, len(groups))}
	}
	return p.readRows(groups[rg], idx, func(int) bool { return true })
}

// readRows reads whole rows at the given (ascending) indexes of a row
// group, from the leaf columns read accepts. It reads one column at a time, seeking through the offset index
// and closing each column's page reader before the next, so only a page or
// two is ever decoded in memory: reading all columns at once would hold a
// page of every column, and in a short-lived process (the CLI) touching
// that much fresh memory costs more than the reads.
func (p *File) readRows(rg parquet.RowGroup, idx []int64, read func(leaf int) bool) ([]tableschema.Row, error) {
	rows := make([]tableschema.Row, len(idx))
	vals := make([]parquet.Value, 256)
	for ci, chunk := range rg.ColumnChunks() {
		if ci >= len(p.cols) || p.cols[ci].field == tableschema.FieldNone || !read(ci) {
			continue
		}
		cc, ok := chunk.(*parquet.FileColumnChunk)
		if !ok {
			continue
		}
		_, _ = cc.OffsetIndex() // loads it, so seeks jump straight to the page
		pages := cc.Pages()
		for k := 0; k < len(idx); {
			if err := pages.SeekToRow(idx[k]); err != nil {
				pages.Close()
				return nil, fail("seeking to a row", err)
			}
			// The page starts at row idx[k]; take every wanted row in it.
			first := k
			_, err := pqfile.ReadPage(pages, idx[k], vals, func(row int64, v parquet.Value) bool {
				if row == idx[k] {
					p.set(&rows[k], ci, v)
					k++
				}
				return k < len(idx)
			})
			if err == nil && k == first {
				err = io.ErrUnexpectedEOF
			}
			if err != nil {
				pages.Close()
				return nil, fail("reading a page", err)
			}
		}
		pages.Close()
	}
	return rows, nil
}

// ScanProjected calls fn for every row of the file with only the given
// fields filled, reading nothing but those columns. Status and processor
// strings are interned, so a scan allocates little beyond the IDs.
func (p *File) ScanProjected(ctx context.Context, fields []tableschema.Field, fn func(rg int, row int64, r *tableschema.Row)) (err error) {
	defer recoverRead(&err)
	intern := map[string]string{}
	vals := make([]parquet.Value, 512)
	for gi, rg := range p.pf.RowGroups() {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := rg.NumRows()
		rows := make([]tableschema.Row, n)
		for _, fld := range fields {
			ci, ok := p.byFld[fld]
			if !ok {
				continue
			}
			pages := rg.ColumnChunks()[ci].Pages()
			for row := int64(0); row < n; {
				end, err := pqfile.ReadPage(pages, row, vals, func(r int64, v parquet.Value) bool {
					if r >= n {
						return false
					}
					if (fld == tableschema.FieldStatus || fld == tableschema.FieldProcessor) && !v.IsNull() {
						b := v.ByteArray()
						s, ok := intern[string(b)]
						if !ok {
							s = string(b)
							intern[s] = s
						}
						*rows[r].StringField(fld) = s
						return true
					}
					p.set(&rows[r], ci, v)
					return true
				})
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					pages.Close()
					return fail("reading a page", err)
				}
				row = end
			}
			pages.Close()
		}
		for i := range rows {
			fn(gi, int64(i), &rows[i])
		}
	}
	return nil
}
