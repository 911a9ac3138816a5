package wal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func payload(s string) func([]byte) []byte {
	return func(b []byte) []byte { return append(b, s...) }
}

func TestReadFramesStopsAtTheFirstBadFrame(t *testing.T) {
	t.Parallel()
	good := AppendFrame([]byte(Magic), payload("one"))
	good = AppendFrame(good, payload("two"))
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 1
	tests := []struct {
		name   string
		data   []byte
		want   []string
		end    int64
		reason string
	}{
		{"whole", good, []string{"one", "two"}, int64(len(good)), ""},
		{"torn last frame", good[:len(good)-2], []string{"one"}, 19, "short frame"},
		{"torn header", good[:len(good)-9], []string{"one"}, 19, "short frame header"},
		{"flipped byte", flipped, []string{"one"}, 19, "checksum mismatch"},
		{"empty", nil, nil, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			end, err := ReadFrames(bytes.NewReader(tc.data), int64(len(tc.data)), 0, func(p []byte) error {
				got = append(got, string(p))
				return nil
			})
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.end, end)
			if tc.reason == "" {
				require.NoError(t, err)
				return
			}
			var te *TailError
			require.True(t, errors.As(err, &te))
			require.Equal(t, tc.reason, te.Reason)
			require.Equal(t, int64(len(tc.data))-tc.end, te.Bytes)
		})
	}
	_, err := ReadFrames(bytes.NewReader([]byte("PAR1xxxx")), 8, 0, nil)
	require.ErrorIs(t, err, ErrBadMagic)
}

func TestSegmentNamesAndListing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, n := range []string{SegmentName("b", 2), SegmentName("a", 10), SegmentName("a", 9), "a.lock", "notes.txt"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), nil, 0o600))
	}
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, SegmentName("c", 1)), 0o600))
	segs, err := ListSegments(dir)
	require.NoError(t, err)
	require.Equal(t, []Segment{
		{Path: filepath.Join(dir, "a-0000000000000009.wal"), Processor: "a", Seq: 9},
		{Path: filepath.Join(dir, "a-0000000000000010.wal"), Processor: "a", Seq: 10},
		{Path: filepath.Join(dir, "b-0000000000000002.wal"), Processor: "b", Seq: 2},
	}, segs, "ordered; the named pipe is not a segment")
	_, _, ok := ParseSegmentName("x-12a.wal")
	require.False(t, ok)
}
