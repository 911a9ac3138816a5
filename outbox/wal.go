package outbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The write-ahead log. Each processor appends to segments of its own,
// <root>/wal/<processor>-<seq>.wal. A segment starts with walMagic, followed
// by frames:
//
//	uint32 length | uint32 CRC-32C of the payload | payload (an encoded record)
//
// A crash can leave a partial last frame; readers stop at the first frame
// that is short, too long or fails its checksum, and everything before it
// is intact because frames are only ever appended.
const (
	walMagic    = "CTDWAL01"
	frameHeader = 8
	maxFrame    = 1 << 20
	walDirName  = "wal"
	walExt      = ".wal"
	lockExt     = ".lock"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendFrame appends r as one frame to dst.
func appendFrame(dst []byte, r *Record) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, frameHeader)...)
	dst = appendRecord(dst, r)
	payload := dst[start+frameHeader:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(payload, castagnoli))
	return dst
}

// tailError describes bytes after the last valid frame of a segment.
type tailError struct {
	Offset int64
	Bytes  int64
	Reason string
}

func (e *tailError) Error() string {
	return fmt.Sprintf("%d bytes after offset %d are not a valid frame (%s)", e.Bytes, e.Offset, e.Reason)
}

// readFrames decodes the frames of a segment from offset from (0 = start of
// the file, magic included). It returns the records, the offset after the
// last valid frame and, when bytes remain after it, a *tailError. A torn
// frame of a live writer and one left by a crash look the same; the caller
// decides which it is.
func readFrames(path string, from int64) ([]Record, int64, error) {
	f, _, err := openRegular(path)
	if err != nil {
		return nil, from, err
	}
	defer f.Close()
	if from == 0 {
		magic := make([]byte, len(walMagic))
		if _, err := io.ReadFull(f, magic); err != nil || string(magic) != walMagic {
			st, _ := f.Stat()
			if st != nil && st.Size() == 0 {
				return nil, 0, nil // created, nothing written yet
			}
			return nil, 0, &FileError{Path: path, Reason: "not a write-ahead log segment (bad magic)"}
		}
		from = int64(len(walMagic))
	}
	data, err := io.ReadAll(io.NewSectionReader(f, from, 1<<62))
	if err != nil {
		return nil, from, err
	}
	var recs []Record
	off := 0
	for off < len(data) {
		reason := ""
		rest := data[off:]
		switch {
		case len(rest) < frameHeader:
			reason = "short frame header"
		default:
			n := binary.LittleEndian.Uint32(rest)
			sum := binary.LittleEndian.Uint32(rest[4:])
			switch {
			case n == 0 || n > maxFrame:
				reason = fmt.Sprintf("frame length %d", n)
			case len(rest) < frameHeader+int(n):
				reason = "short frame"
			case crc32.Checksum(rest[frameHeader:frameHeader+int(n)], castagnoli) != sum:
				reason = "checksum mismatch"
			default:
				r, err := decodeRecord(rest[frameHeader : frameHeader+int(n)])
				if err != nil {
					reason = "undecodable record"
					break
				}
				recs = append(recs, r)
				off += frameHeader + int(n)
				continue
			}
		}
		return recs, from + int64(off), &tailError{Offset: from + int64(off), Bytes: int64(len(data) - off), Reason: reason}
	}
	return recs, from + int64(off), nil
}

// segmentName is the file name of a processor's segment.
func segmentName(processor string, seq uint64) string {
	return fmt.Sprintf("%s-%016d%s", processor, seq, walExt)
}

// parseSegmentName splits a segment file name into processor and sequence.
func parseSegmentName(name string) (processor string, seq uint64, ok bool) {
	base, found := strings.CutSuffix(name, walExt)
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(base, '-')
	if i <= 0 {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(base[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return base[:i], seq, true
}

// walSegment is one segment file found in the WAL directory.
type walSegment struct {
	path      string
	processor string
	seq       uint64
}

// listSegments lists the WAL segments under dir, ordered by processor and
// sequence.
func listSegments(dir string) ([]walSegment, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var segs []walSegment
	for _, e := range entries {
		proc, seq, ok := parseSegmentName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		segs = append(segs, walSegment{path: filepath.Join(dir, e.Name()), processor: proc, seq: seq})
	}
	sort.Slice(segs, func(i, j int) bool {
		if segs[i].processor != segs[j].processor {
			return segs[i].processor < segs[j].processor
		}
		return segs[i].seq < segs[j].seq
	})
	return segs, nil
}
