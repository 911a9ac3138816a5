// Package wal is the outbox's write-ahead log format: checksummed frames
// in segment files named after their processor and sequence number, and
// the filesystem seam the log writer goes through. It knows nothing of
// what a frame holds; package outbox encodes records into frames.
//
// # Format
//
// A segment starts with Magic, followed by frames:
//
//	uint32 length | uint32 CRC-32C of the payload | payload
//
// A crash can leave a partial last frame; ReadFrames stops at the first
// frame that is short, too long or fails its checksum, and everything
// before it is intact because frames are only ever appended.
//
// # Files
//
// Segments are <dir>/<processor>-<seq>.wal, with sequence numbers padded
// to 16 digits so they sort; <dir>/<processor>.lock is the processor's
// liveness lock, and <dir>/<processor>.json what the processor announced
// about itself (its default queue) while it lives, for the others to
// read. A log written before announcements has no such file, and a
// reader of that time skips it as it skips every name that is not a
// segment.
package wal

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

// The names and limits of the format.
const (
	// Magic starts every segment.
	Magic = "CTDWAL01"
	// DirName is the log's directory under the outbox's log root.
	DirName = "wal"
	// Ext ends a segment's name; LockExt a processor's lock file's;
	// AnnounceExt the name of what a processor announced.
	Ext         = ".wal"
	LockExt     = ".lock"
	AnnounceExt = ".json"
	// MaxFrame bounds a frame's payload.
	MaxFrame    = 1 << 20
	frameHeader = 8
)

// ErrBadMagic marks a file that is not a log segment.
var ErrBadMagic = errors.New("not a write-ahead log segment (bad magic)")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendFrame appends one frame to dst; encode appends the payload to the
// slice it is given and returns it.
func AppendFrame(dst []byte, encode func([]byte) []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, frameHeader)...)
	dst = encode(dst)
	payload := dst[start+frameHeader:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(payload, castagnoli))
	return dst
}

// TailError describes bytes after the last valid frame of a segment.
type TailError struct {
	// Offset is where the bad bytes start; Bytes how many there are.
	Offset, Bytes int64
	// Reason says what is wrong with them.
	Reason string
}

// Error says where the bad bytes are and why.
func (e *TailError) Error() string {
	return fmt.Sprintf("%d bytes after offset %d are not a valid frame (%s)", e.Bytes, e.Offset, e.Reason)
}

// ReadFrames reads the frames of a segment of the given size from offset
// from (0 = the start of the file, magic included) and calls decode with
// each payload; a payload decode refuses ends the valid frames like a bad
// checksum. It returns the offset after the last valid frame and, when
// bytes remain after it, a *TailError. A torn frame of a live writer and
// one left by a crash look the same; the caller decides which it is. An
// empty file is an empty segment (created, nothing written yet).
func ReadFrames(r io.ReaderAt, size, from int64, decode func(payload []byte) error) (int64, error) {
	if from == 0 {
		if size == 0 {
			return 0, nil
		}
		magic := make([]byte, len(Magic))
		if _, err := r.ReadAt(magic, 0); err != nil || string(magic) != Magic {
			return 0, ErrBadMagic
		}
		from = int64(len(Magic))
	}
	if size < from {
		return from, nil
	}
	data := make([]byte, size-from)
	if n, err := r.ReadAt(data, from); err != nil && !errors.Is(err, io.EOF) {
		return from, err
	} else {
		data = data[:n]
	}
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
			case n == 0 || n > MaxFrame:
				reason = fmt.Sprintf("frame length %d", n)
			case len(rest) < frameHeader+int(n):
				reason = "short frame"
			case crc32.Checksum(rest[frameHeader:frameHeader+int(n)], castagnoli) != sum:
				reason = "checksum mismatch"
			case decode(rest[frameHeader:frameHeader+int(n)]) != nil:
				reason = "undecodable record"
			default:
				off += frameHeader + int(n)
				continue
			}
		}
		return from + int64(off), &TailError{Offset: from + int64(off), Bytes: int64(len(data) - off), Reason: reason}
	}
	return from + int64(off), nil
}

// SegmentName is the file name of a processor's segment.
func SegmentName(processor string, seq uint64) string {
	return fmt.Sprintf("%s-%016d%s", processor, seq, Ext)
}

// ParseSegmentName splits a segment file name into processor and sequence.
func ParseSegmentName(name string) (processor string, seq uint64, ok bool) {
	base, found := strings.CutSuffix(name, Ext)
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

// Segment is one segment file found in a log directory.
type Segment struct {
	Path      string
	Processor string
	Seq       uint64
}

// ListSegments lists the segments under dir that are regular files,
// ordered by processor and sequence.
func ListSegments(dir string) ([]Segment, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var segs []Segment
	for _, e := range entries {
		proc, seq, ok := ParseSegmentName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		segs = append(segs, Segment{Path: filepath.Join(dir, e.Name()), Processor: proc, Seq: seq})
	}
	sort.Slice(segs, func(i, j int) bool {
		if segs[i].Processor != segs[j].Processor {
			return segs[i].Processor < segs[j].Processor
		}
		return segs[i].Seq < segs[j].Seq
	})
	return segs, nil
}

// FS is what the log writer needs of the filesystem. It is a seam: tests
// put a filesystem that fails on demand (a full disk, a read-only
// remount) in its place.
type FS interface {
	// Create creates a new file that must not exist yet.
	Create(path string) (File, error)
	// Remove removes a file.
	Remove(path string) error
	// SyncDir makes the directory's entries durable.
	SyncDir(dir string) error
}

// File is an open log segment.
type File interface {
	io.Writer
	Sync() error
	Close() error
}

// OSFS is the real filesystem.
type OSFS struct{}

// Create creates path exclusively, for appending, private to the user.
func (OSFS) Create(path string) (File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
}

// Remove removes path.
func (OSFS) Remove(path string) error { return os.Remove(path) }

// SyncDir fsyncs the directory.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
