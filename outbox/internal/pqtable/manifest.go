package pqtable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/ctdispatch/ctdispatch/outbox/internal/tableschema"
	"hash/crc32"
	"io"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/bloom"
)

// Manifest lists data files of one table with what a lookup by ID or by
// cloud_task_id needs to know about each row group without reading the
// file's footer: its ID bounds and where the bitsets of its two bloom
// filters lie in the file. A lookup computes the one 32-byte block of a
// bitset an ID hashes to and reads only that.
type Manifest struct {
	// Table is the table's name; a manifest of another table is refused.
	Table string
	// Files are the files listed, each as it was when listed.
	Files []ManifestFile
}

// ManifestFile is one data file in a Manifest. Name, Size and ModTime
// identify the version of the file the groups describe: an entry applies
// only to a file listed with the same three.
type ManifestFile struct {
	Name    string
	Size    int64
	ModTime int64 // Unix nanoseconds, as the store lists it
	Groups  []ManifestGroup
}

// ManifestGroup describes one row group.
type ManifestGroup struct {
	Rows int64
	// HasBounds says MinID and MaxID hold the ID column's bounds.
	HasBounds    bool
	MinID, MaxID string
	// IDBloom and CloudBloom locate the bitsets of the ID column's and of
	// cloud_task_id's split-block bloom filters (Length 0: none).
	IDBloom, CloudBloom Bitset
}

// Bitset locates a split-block bloom filter's bitset within a file.
type Bitset struct {
	Offset, Length int64
}

// manifestMagic starts every manifest; the digit is the format version.
const manifestMagic = "CTDMANI1"

// Limits a manifest must respect to be read; a damaged one stating more
// is refused before anything is allocated from its counts.
const (
	maxNameBytes  = 1024
	maxBoundBytes = 64 << 10
)

// ErrManifest marks a manifest that is damaged or not one.
var ErrManifest = errors.New("not a usable manifest")

// block is a bloom filter block's size in bytes.
const block = int64(bloom.BlockSize)

// MarshalManifest encodes m: a magic, varint-encoded fields, and a
// CRC-32C of everything before it, so a damaged byte anywhere is detected.
func MarshalManifest(m *Manifest) []byte {
	b := []byte(manifestMagic)
	b = appendString(b, m.Table)
	b = binary.AppendUvarint(b, uint64(len(m.Files)))
	for i := range m.Files {
		f := &m.Files[i]
		b = appendString(b, f.Name)
		b = binary.AppendUvarint(b, uint64(f.Size))
		b = binary.AppendVarint(b, f.ModTime)
		b = binary.AppendUvarint(b, uint64(len(f.Groups)))
		for _, g := range f.Groups {
			b = binary.AppendUvarint(b, uint64(g.Rows))
			if g.HasBounds {
				b = append(b, 1)
				b = appendString(b, g.MinID)
				b = appendString(b, g.MaxID)
			} else {
				b = append(b, 0)
			}
			for _, bs := range []Bitset{g.IDBloom, g.CloudBloom} {
				b = binary.AppendUvarint(b, uint64(bs.Offset))
				b = binary.AppendUvarint(b, uint64(bs.Length))
			}
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// UnmarshalManifest decodes a manifest of table, checking its magic,
// checksum and that every entry is plausible: bitsets whole blocks inside
// their file, row counts inside the reader's bounds. Errors match
// ErrManifest.
func UnmarshalManifest(data []byte, table string) (*Manifest, error) {
	if len(data) < len(manifestMagic)+4 || !bytes.HasPrefix(data, []byte(manifestMagic)) {
		return nil, fmt.Errorf("%w: no %q header (%d bytes)", ErrManifest, manifestMagic, len(data))
	}
	body := data[:len(data)-4]
	if sum := binary.LittleEndian.Uint32(data[len(data)-4:]); sum != crc32.Checksum(body, crcTable) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrManifest)
	}
	d := &decoder{b: body[len(manifestMagic):]}
	m := &Manifest{Table: d.str(maxNameBytes)}
	if d.err == nil && m.Table != table {
		return nil, fmt.Errorf("%w: a manifest of table %q, not %q", ErrManifest, m.Table, table)
	}
	nf := d.count()
	for i := uint64(0); i < nf && d.err == nil; i++ {
		f := ManifestFile{Name: d.str(maxNameBytes), Size: d.int(), ModTime: d.varint()}
		ng := d.count()
		for j := uint64(0); j < ng && d.err == nil; j++ {
			g := ManifestGroup{Rows: d.int()}
			if g.HasBounds = d.byte() == 1; g.HasBounds {
				g.MinID, g.MaxID = d.str(maxBoundBytes), d.str(maxBoundBytes)
			}
			g.IDBloom = Bitset{Offset: d.int(), Length: d.int()}
			g.CloudBloom = Bitset{Offset: d.int(), Length: d.int()}
			for _, bs := range []Bitset{g.IDBloom, g.CloudBloom} {
				if bs.Length%block != 0 || bs.Offset+bs.Length > f.Size {
					d.fail(fmt.Errorf("file %s: bitset of %d bytes at %d in %d bytes", f.Name, bs.Length, bs.Offset, f.Size))
				}
			}
			f.Groups = append(f.Groups, g)
		}
		m.Files = append(m.Files, f)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Errorf("%d bytes after the last entry", len(d.b)))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, d.err)
	}
	return m, nil
}

// decoder reads a manifest's fields; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 { return readVarint(d, binary.Uvarint) }

func (d *decoder) varint() int64 { return readVarint(d, binary.Varint) }

// readVarint reads one varint with read (binary.Uvarint or Varint).
func readVarint[T uint64 | int64](d *decoder, read func([]byte) (T, int)) T {
	v, n := read(d.b)
	if n <= 0 {
		d.fail(io.ErrUnexpectedEOF)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int reads a non-negative size or offset.
func (d *decoder) int() int64 {
	v := d.uvarint()
	if v > 1<<62 {
		d.fail(fmt.Errorf("value %d out of range", v))
		return 0
	}
	return int64(v)
}

// count reads a number of entries, each of which takes at least a byte.
func (d *decoder) count() uint64 {
	v := d.uvarint()
	if v > uint64(len(d.b)) {
		d.fail(fmt.Errorf("%d entries in %d bytes", v, len(d.b)))
		return 0
	}
	return v
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail(io.ErrUnexpectedEOF)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) str(limit int) string {
	n := d.uvarint()
	if n > uint64(limit) || n > uint64(len(d.b)) {
		d.fail(fmt.Errorf("a string of %d bytes", n))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// ManifestGroups describes the file's row groups for a manifest. It reads
// the headers of the bloom filters of the ID column and of cloud_task_id,
// to find where their bitsets start.
func (p *File) ManifestGroups() (_ []ManifestGroup, err error) {
	defer recoverRead(&err)
	out := make([]ManifestGroup, 0, len(p.pf.RowGroups()))
	for _, rg := range p.pf.RowGroups() {
		g := ManifestGroup{Rows: rg.NumRows()}
		chunks := rg.ColumnChunks()
		if ci, ok := p.byFld[tableschema.FieldID]; ok {
			if cc, ok := chunks[ci].(*parquet.FileColumnChunk); ok {
				if min, max, ok := cc.Bounds(); ok && cc.Type().Kind() == parquet.ByteArray {
					g.HasBounds, g.MinID, g.MaxID = true, string(min.ByteArray()), string(max.ByteArray())
				}
				if g.IDBloom, err = p.bitset(cc); err != nil {
					return nil, err
				}
			}
		}
		if ci, ok := p.byFld[tableschema.FieldCloudTaskID]; ok {
			if cc, ok := chunks[ci].(*parquet.FileColumnChunk); ok {
				if g.CloudBloom, err = p.bitset(cc); err != nil {
					return nil, err
				}
			}
		}
		out = append(out, g)
	}
	return out, nil
}

// bitset locates a chunk's bloom filter bitset; a chunk without a filter
// the outbox can read block by block (uncompressed split-block, xxHash)
// has none.
func (p *File) bitset(cc *parquet.FileColumnChunk) (Bitset, error) {
	bf, err := cc.BloomFilterFrom(p.pf)
	if errors.Is(err, parquet.ErrMissingBloomFilter) || (err == nil && bf == nil) {
		return Bitset{}, nil
	}
	if err != nil {
		return Bitset{}, fail("reading bloom filter", err)
	}
	_, off, n := bf.SectionReader.Outer()
	if n <= 0 || n%block != 0 || n != bf.Size() {
		return Bitset{}, nil // compressed or odd: not readable by block
	}
	return Bitset{Offset: off, Length: n}, nil
}

// Hash is the bloom filter hash of a value, as Parquet writers compute it.
func Hash(value string) uint64 { return bloom.XXH64{}.Sum64([]byte(value)) }

// OutOfBounds reports whether the row group's ID bounds exclude value
// (for a lookup by ID; other columns have no bounds in a manifest).
func (g *ManifestGroup) OutOfBounds(fld tableschema.Field, value string) bool {
	return fld == tableschema.FieldID && g.HasBounds && (value < g.MinID || value > g.MaxID)
}

// MayHold reports whether the row group may hold a row whose column fld
// (tableschema.FieldID or tableschema.FieldCloudTaskID) is value, whose Hash is h. It reads at
// most one 32-byte block of a bitset through ra, the data file.
func (g *ManifestGroup) MayHold(fld tableschema.Field, value string, h uint64, ra io.ReaderAt) (bool, error) {
	if g.OutOfBounds(fld, value) {
		return false, nil
	}
	bs := g.CloudBloom
	if fld == tableschema.FieldID {
		bs = g.IDBloom
	}
	if bs.Length == 0 {
		return true, nil
	}
	var buf [bloom.BlockSize]byte
	off := bs.Offset + block*int64(((h>>32)*uint64(bs.Length/block))>>32)
	if n, err := ra.ReadAt(buf[:], off); n < len(buf) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return false, err
	}
	return bloom.MakeSplitBlockFilter(buf[:]).Check(h), nil
}
