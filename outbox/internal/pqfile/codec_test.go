package pqfile

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

// TestZstdCodecSmallWindowKeepsPageBytes checks that the bounded encoder
// window changes no byte of a compressed page up to the window's size,
// against an encoder with the library's default window, and that the
// frames decode back.
func TestZstdCodecSmallWindowKeepsPageBytes(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	page := func(n int) []byte {
		b := make([]byte, 0, n)
		for len(b) < n {
			b = fmt.Appendf(b, "dispatch:run%d:task%d:1", rng.IntN(5000), rng.IntN(1000))
		}
		return b[:n]
	}
	for _, level := range []zstd.EncoderLevel{zstd.SpeedBetterCompression, zstd.SpeedBestCompression} {
		ref, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
			zstd.WithZeroFrames(true), zstd.WithEncoderCRC(false))
		require.NoError(t, err)
		c := NewZstdCodec(level)
		for _, n := range []int{100, PageBufferBytes, 3 * PageBufferBytes, 1 << 20} {
			src := page(n)
			got, err := c.Encode(nil, src)
			require.NoError(t, err)
			require.Equal(t, ref.EncodeAll(src, nil), got, "level %v, %d bytes", level, n)
			back, err := c.Decode(nil, got)
			require.NoError(t, err)
			require.Equal(t, src, back)
		}
	}
}

// TestZstdCodecEncoderMemory checks what the log conversions' codec costs
// on its first page: the encoder it keeps for the life of the process
// must not allocate the library's default 8 MiB window history on top of
// its tables (about 6 MiB at the better level), which a dispatcher would
// hold per kept encoder. Not parallel: it reads the
// process's allocation counter.
func TestZstdCodecEncoderMemory(t *testing.T) {
	for _, level := range []zstd.EncoderLevel{zstd.SpeedDefault, zstd.SpeedBetterCompression} {
		c := NewZstdCodec(level)
		src := make([]byte, PageBufferBytes)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := c.Encode(nil, src)
		require.NoError(t, err)
		runtime.ReadMemStats(&after)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8<<20), "level %v", level)
	}
}
