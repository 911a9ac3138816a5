package parquetbox

import (
	"errors"
	"io"

	"github.com/ctdispatch/ctdispatch/outbox"

	"github.com/ctdispatch/ctdispatch/outbox/internal/wal"
)

// The write-ahead log's format (frames, segments, the filesystem seam)
// lives in package internal/wal; this file encodes records into its
// frames. Each processor appends to segments of its own,
// <log dir>/wal/<processor>-<seq>.wal.
const (
	walMagic   = wal.Magic
	walDirName = wal.DirName
	walExt     = wal.Ext
	lockExt    = wal.LockExt
)

type (
	tailError  = wal.TailError
	walSegment = wal.Segment
	logFS      = wal.FS
	logFile    = wal.File
)

var (
	segmentName      = wal.SegmentName
	parseSegmentName = wal.ParseSegmentName
	listSegments     = wal.ListSegments
)

// appendFrame appends r as one frame to dst.
func appendFrame(dst []byte, r *outbox.Record) []byte {
	return wal.AppendFrame(dst, func(b []byte) []byte { return appendRecord(b, r) })
}

// readFrames decodes the records of a segment from offset from (0 = start
// of the file, magic included). It returns the records, the offset after
// the last valid frame and, when bytes remain after it, a *tailError.
// Only a regular file is read.
func readFrames(path string, from int64) ([]outbox.Record, int64, error) {
	f, st, err := openRegular(path)
	if err != nil {
		return nil, from, err
	}
	defer f.Close()
	return readFramesOf(f, path, st.Size(), from)
}

// readFramesOf is readFrames of an open segment of the given size.
func readFramesOf(f io.ReaderAt, path string, size, from int64) ([]outbox.Record, int64, error) {
	var recs []outbox.Record
	end, err := wal.ReadFrames(f, size, from, func(p []byte) error {
		r, err := decodeRecord(p)
		if err == nil {
			recs = append(recs, r)
		}
		return err
	})
	if errors.Is(err, wal.ErrBadMagic) {
		return nil, 0, &FileError{Path: path, Reason: err.Error()}
	}
	return recs, end, err
}
