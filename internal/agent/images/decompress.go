package images

import (
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// maxZstdWindow bounds the memory one chunk's zstd frame may ask for
// (zstd --long=27 is 128 MiB); a frame asking more is refused, not
// allocated, times Concurrency.
const maxZstdWindow = 128 << 20

// openChunk decompresses one chunk's layer stream.
//
// TODO: replace with golden.Chunk.Open once the golden package has it.
func openChunk(c golden.Chunk, r io.Reader) (io.ReadCloser, error) {
	switch c.Compression {
	case golden.Zstd:
		d, err := zstd.NewReader(r,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(maxZstdWindow),
			zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	case golden.LZ4:
		return io.NopCloser(lz4.NewReader(r)), nil
	default:
		return nil, fmt.Errorf("chunk %d: unknown compression %q", c.Index, c.Compression)
	}
}
