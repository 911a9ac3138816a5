package pqfile

import (
	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/compress"
	pzstd "github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/format"
)

// ZstdCodec compresses pages, keeping its encoders for the life of the
// process. parquet-go's codec pools them in a sync.Pool, which every
// garbage collection empties; the stronger levels allocate tens of
// megabytes of tables per encoder, so re-creating one per page made
// writing several times slower. Frames are standard zstd, decoded by any
// reader.
type ZstdCodec struct {
	level zstd.EncoderLevel
	free  chan *zstd.Encoder
	dec   pzstd.Codec
}

var _ compress.Codec = (*ZstdCodec)(nil)

// encoderWindowBytes bounds an encoder's history: 16 times a page, so
// every page is one frame encoded exactly as with the default window.
const encoderWindowBytes = 1 << 20

// NewZstdCodec returns a codec compressing at level.
func NewZstdCodec(level zstd.EncoderLevel) *ZstdCodec {
	return &ZstdCodec{level: level, free: make(chan *zstd.Encoder, 4)}
}

// String names the codec.
func (c *ZstdCodec) String() string { return "ZSTD" }

// CompressionCodec is ZSTD.
func (c *ZstdCodec) CompressionCodec() format.CompressionCodec { return format.Zstd }

// Encode compresses src into dst.
func (c *ZstdCodec) Encode(dst, src []byte) ([]byte, error) {
	var e *zstd.Encoder
	select {
	case e = <-c.free:
	default:
		var err error
		e, err = zstd.NewWriter(nil,
			zstd.WithEncoderLevel(c.level),
			zstd.WithEncoderConcurrency(1),
			zstd.WithZeroFrames(true),
			zstd.WithEncoderCRC(false),
			// Pages are compressed one at a time and hold PageBufferBytes
			// (dictionary pages a little more): a window past a page
			// finds no more matches, yet every encoder allocates its
			// window's history (8 MiB by default at the faster levels),
			// which a dispatcher converting its log holds for its life.
			zstd.WithWindowSize(encoderWindowBytes),
		)
		if err != nil {
			return nil, err
		}
	}
	out := e.EncodeAll(src, dst[:0])
	select {
	case c.free <- e:
	default: // enough kept; let this one go
	}
	return out, nil
}

// Decode decompresses src into dst.
func (c *ZstdCodec) Decode(dst, src []byte) ([]byte, error) { return c.dec.Decode(dst, src) }
