package outbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/bloom"
	"github.com/parquet-go/parquet-go/format"

	"github.com/ctdispatch/ctdispatch/outbox/internal/pqfile"
)

// field identifies the Record field a column fills.
type field uint8

const (
	fieldNone field = iota
	fieldID
	fieldCloudTaskID
	fieldQueue
	fieldRunID
	fieldTaskKey
	fieldAttempt
	fieldKind
	fieldStatus
	fieldErrorCode
	fieldCreateCalls
	fieldPayload
	fieldProcessor
	fieldCreatedAt
	fieldUpdatedAt
	fieldDueAt
)

var columnFields = map[string]field{
	"cloud_task_id": fieldCloudTaskID, "queue": fieldQueue, "run_id": fieldRunID, "task_key": fieldTaskKey,
	"attempt": fieldAttempt, "kind": fieldKind, "status": fieldStatus, "error_code": fieldErrorCode,
	"create_calls": fieldCreateCalls, "payload_sha256": fieldPayload, "processor_uuid": fieldProcessor,
	"created_at": fieldCreatedAt, "updated_at": fieldUpdatedAt, "due_at": fieldDueAt,
}

// column describes how one leaf column of a file maps onto a Record.
type column struct {
	field field
	// unit converts a stored time to microseconds: its value per
	// microsecond is a divisor (nanoseconds) and a multiplier (millis).
	timeDiv, timeMul int64
}

// pqFile is one Parquet file of a table, opened once and kept: the footer,
// the column mapping, and (when cached) the bloom filters of the ID column.
type pqFile struct {
	path  string // for messages: a path or a URL
	name  string // within the table
	size  int64
	table Table
	f     io.Closer
	pf    *parquet.File
	cols  []column // by leaf index
	byFld map[field]int
	ours  bool // written by this package (sorted, our layout)
	// footerLen is the footer's stored size, for the cache's budget.
	footerLen int64

	mu     sync.Mutex
	blooms map[int]bloom.SplitBlockFilter // row group -> ID bloom filter bits
}

// openParquet opens and checks a Parquet file of table t. Every failure is
// a *FileError naming the path and the reason. Every column the outbox
// reads must have the physical and logical type of the table's schema (see
// checkColumn); a file that differs is foreign, since decoding it as the
// outbox's types would misread it or crash.
func openParquet(path string, t Table, ra readerAtCloser, size int64) (p *pqFile, err error) {
	defer recoverRead(path, &err)
	footerLen, err := pqfile.CheckFooterLength(ra, size)
	if err != nil {
		return nil, &FileError{Path: path, Reason: "not a readable Parquet file", Err: fmt.Errorf("%w: %v", ErrDamaged, err)}
	}
	pf, err := parquet.OpenFile(ra, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, &FileError{Path: path, Reason: "not a readable Parquet file", Err: err}
	}
	if err := pqfile.CheckBounds(pf.Metadata(), size); err != nil {
		return nil, &FileError{Path: path, Reason: "implausible Parquet footer", Err: fmt.Errorf("%w: %v", ErrDamaged, err)}
	}
	p = &pqFile{path: path, size: size, table: t, f: ra, pf: pf, byFld: map[field]int{}, footerLen: footerLen}
	leaves := pf.Schema().Columns()
	p.cols = make([]column, len(leaves))
	for i, lp := range leaves {
		if len(lp) != 1 {
			continue // nested columns are not part of the outbox layout
		}
		name := lp[0]
		fld := columnFields[name]
		if name == t.idColumn() {
			fld = fieldID
		}
		if fld == fieldNone {
			continue
		}
		leaf, _ := pf.Schema().Lookup(lp...)
		if err := checkColumn(fld, leaf.Node); err != nil {
			return nil, &FileError{Path: path, Reason: fmt.Sprintf("column %s is %s; %v", name, describeNode(leaf.Node), err), Err: ErrForeignFile}
		}
		c := column{field: fld}
		if fld == fieldCreatedAt || fld == fieldUpdatedAt || fld == fieldDueAt {
			c.timeDiv, c.timeMul = timeUnit(leaf.Node.Type())
		}
		p.cols[i] = c
		p.byFld[fld] = i
	}
	if _, ok := p.byFld[fieldID]; !ok {
		return nil, &FileError{Path: path, Reason: fmt.Sprintf("no column %s: not a %s file", t.idColumn(), t), Err: ErrForeignFile}
	}
	_, p.ours = pf.Lookup(pqfile.MetaKeyWriter)
	return p, nil
}

// recoverRead turns a panic inside the Parquet library into a FileError
// for path. The library trusts the lengths and offsets a file states, and
// some damaged files make it index out of range or allocate absurdly; such
// a file must be skipped like any other damaged one, not end the process.
func recoverRead(path string, err *error) {
	if v := recover(); v != nil {
		*err = &FileError{Path: path, Reason: "not a readable Parquet file", Err: fmt.Errorf("%w: reader panicked: %v", ErrDamaged, v)}
	}
}

// checkColumn checks that a leaf column holds the type the outbox reads
// into fld: strings are BYTE_ARRAY (plain, STRING or ENUM), create_calls
// is INT32 or INT64 (plain or a signed INTEGER), times are INT64 (plain or
// TIMESTAMP of any unit). No column may repeat.
func checkColumn(fld field, n parquet.Node) error {
	if n.Repeated() {
		return errors.New("a repeated column; want one value per row")
	}
	typ := n.Type()
	var lt any
	if l := typ.LogicalType(); l != nil {
		lt = l.Value
	}
	switch fld {
	case fieldCreateCalls:
		if typ.Kind() != parquet.Int32 && typ.Kind() != parquet.Int64 {
			return errors.New("want INT32 or INT64")
		}
		if it, ok := lt.(*format.IntType); lt != nil && (!ok || !it.IsSigned) {
			return errors.New("want a signed integer")
		}
	case fieldCreatedAt, fieldUpdatedAt, fieldDueAt:
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
	return 1, 1 // microseconds, as this package writes
}

func (p *pqFile) close() error { return p.f.Close() }

// cachedBytes estimates the memory an open file holds: its footer (as
// stored; decoded it is larger, in proportion) and the bloom filters
// cached for it.
func (p *pqFile) cachedBytes() int64 {
	n := int64(p.footerLen)
	p.mu.Lock()
	for _, b := range p.blooms {
		n += int64(len(b)) * int64(unsafe.Sizeof(bloom.Block{}))
	}
	p.mu.Unlock()
	return n
}

// decode turns a row of this file into a Record.
func (p *pqFile) decode(row parquet.Row) Record {
	r := Record{Table: p.table}
	for _, v := range row {
		p.set(&r, v.Column(), v)
	}
	r.normalize()
	return r
}

// set stores the value of leaf column ci in the field it maps to.
func (p *pqFile) set(r *Record, ci int, v parquet.Value) {
	if ci < 0 || ci >= len(p.cols) || v.IsNull() {
		return
	}
	c := p.cols[ci]
	switch c.field {
	case fieldNone:
	case fieldCreateCalls:
		switch v.Kind() {
		case parquet.Int32:
			r.CreateCalls = v.Int32()
		case parquet.Int64:
			r.CreateCalls = int32(v.Int64())
		}
	case fieldCreatedAt, fieldUpdatedAt, fieldDueAt:
		t := time.Time{}
		if us := v.Int64() / c.timeDiv * c.timeMul; us != 0 {
			t = time.UnixMicro(us).UTC()
		}
		switch c.field {
		case fieldCreatedAt:
			r.CreatedAt = t
		case fieldUpdatedAt:
			r.UpdatedAt = t
		default:
			r.DueAt = t
		}
	default:
		s := string(v.ByteArray())
		switch c.field {
		case fieldID:
			r.ID = s
		case fieldCloudTaskID:
			r.CloudTaskID = s
		case fieldQueue:
			r.Queue = s
		case fieldRunID:
			r.RunID = s
		case fieldTaskKey:
			r.TaskKey = s
		case fieldAttempt:
			r.Attempt = s
		case fieldKind:
			r.Kind = s
		case fieldStatus:
			r.Status = Status(s)
		case fieldErrorCode:
			r.ErrorCode = s
		case fieldPayload:
			r.PayloadSHA256 = s
		case fieldProcessor:
			r.ProcessorUUID = s
		}
	}
}

// scan calls fn for every row of the file, in file order.
func (p *pqFile) scan(fn func(Record) error) (err error) {
	defer recoverRead(p.path, &err)
	buf := make([]parquet.Row, 256)
	for _, rg := range p.pf.RowGroups() {
		rows := rg.Rows()
		for {
			n, err := rows.ReadRows(buf)
			for _, row := range buf[:n] {
				if ferr := fn(p.decode(row)); ferr != nil {
					rows.Close()
					return ferr
				}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rows.Close()
				return p.fail("reading rows", err)
			}
		}
		rows.Close()
	}
	return nil
}

func (p *pqFile) fail(what string, err error) error {
	var fe *FileError
	if errors.As(err, &fe) {
		return err
	}
	return &FileError{Path: p.path, Reason: what, Err: err}
}

// find returns every row whose column fld equals value. It skips row groups
// by their statistics and bloom filters, and pages by the page index, so a
// hit reads a few pages and a miss usually reads nothing beyond the footer.
func (p *pqFile) find(fld field, value string, cacheBloom bool) (_ []Record, err error) {
	defer recoverRead(p.path, &err)
	ci, ok := p.byFld[fld]
	if !ok {
		return nil, nil
	}
	want := []byte(value)
	var out []Record
	for gi, rg := range p.pf.RowGroups() {
		cc, ok := rg.ColumnChunks()[ci].(*parquet.FileColumnChunk)
		if !ok || cc.Type().Kind() != parquet.ByteArray {
			continue
		}
		if min, max, ok := cc.Bounds(); ok && (bytes.Compare(want, min.ByteArray()) < 0 || bytes.Compare(want, max.ByteArray()) > 0) {
			continue
		}
		maybe, err := p.bloomCheck(gi, cc, fld, want, cacheBloom)
		if err != nil {
			return nil, err
		}
		if !maybe {
			continue
		}
		rowsIdx, err := p.matchRows(cc, rg.NumRows(), want)
		if err != nil {
			return nil, err
		}
		if len(rowsIdx) == 0 {
			continue
		}
		recs, err := p.readRows(rg, rowsIdx)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = recs // usually the only row group that matches
			continue
		}
		out = append(out, recs...)
	}
	return out, nil
}

// bloomCheck reports whether the row group may contain value. The ID
// column's filter is kept in memory when cacheBloom is set, since Latest asks
// about new IDs on every dispatch.
func (p *pqFile) bloomCheck(gi int, cc *parquet.FileColumnChunk, fld field, want []byte, cacheBloom bool) (bool, error) {
	if cacheBloom && fld == fieldID {
		p.mu.Lock()
		defer p.mu.Unlock()
		f, ok := p.blooms[gi]
		if !ok {
			bf, err := cc.BloomFilterFrom(p.pf)
			switch {
			case errors.Is(err, parquet.ErrMissingBloomFilter):
			case err != nil:
				return false, p.fail("reading bloom filter", err)
			case bf != nil:
				bits := make([]byte, bf.Size())
				if _, err := bf.ReadAt(bits, 0); err != nil && !errors.Is(err, io.EOF) {
					return false, p.fail("reading bloom filter", err)
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
		return false, p.fail("reading bloom filter", err)
	}
	return ok, nil
}

// matchRows returns the indexes (within the row group) of the rows whose
// value in the chunk equals want, reading only pages whose page-index
// bounds admit it.
func (p *pqFile) matchRows(cc *parquet.FileColumnChunk, numRows int64, want []byte) ([]int64, error) {
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
			return nil, p.fail("seeking in column "+p.table.idColumn(), err)
		}
		for row := s.from; row < s.to; {
			end, err := pqfile.ReadPage(pages, row, vals, func(r int64, v parquet.Value) bool {
				if r >= s.to {
					return false
				}
				if !v.IsNull() && bytes.Equal(v.ByteArray(), want) {
					hits = append(hits, r)
				}
				return true
			})
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				pages.Close()
				return nil, p.fail("reading a page", err)
			}
			row = end
		}
		pages.Close()
	}
	return hits, nil
}

// readRows reads whole rows at the given (ascending) indexes of a row
// group. It reads one column at a time, seeking through the offset index
// and closing each column's page reader before the next, so only a page or
// two is ever decoded in memory: reading all columns at once would hold a
// page of every column, and in a short-lived process (the CLI) touching
// that much fresh memory costs more than the reads.
func (p *pqFile) readRows(rg parquet.RowGroup, idx []int64) (_ []Record, err error) {
	defer recoverRead(p.path, &err)
	recs := make([]Record, len(idx))
	vals := make([]parquet.Value, 256)
	for ci, chunk := range rg.ColumnChunks() {
		if ci >= len(p.cols) || p.cols[ci].field == fieldNone {
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
				return nil, p.fail("seeking to a row", err)
			}
			// The page starts at row idx[k]; take every wanted row in it.
			first := k
			_, err := pqfile.ReadPage(pages, idx[k], vals, func(row int64, v parquet.Value) bool {
				if row == idx[k] {
					p.set(&recs[k], ci, v)
					k++
				}
				return k < len(idx)
			})
			if err == nil && k == first {
				err = io.ErrUnexpectedEOF
			}
			if err != nil {
				pages.Close()
				return nil, p.fail("reading a page", err)
			}
		}
		pages.Close()
	}
	for i := range recs {
		recs[i].Table = p.table
		recs[i].normalize()
	}
	return recs, nil
}

// readerAtCloser is what a Parquet file is read through.
type readerAtCloser interface {
	io.ReaderAt
	io.Closer
}

// openLocalParquet opens a file on disk.
func openLocalParquet(path string, t Table) (*pqFile, error) {
	f, st, err := openRegular(path)
	if err != nil {
		var fe *FileError
		if errors.As(err, &fe) {
			return nil, fe
		}
		return nil, &FileError{Path: path, Reason: "cannot open", Err: err}
	}
	p, err := openParquet(path, t, f, st.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	p.name = filepath.Base(path)
	return p, nil
}
