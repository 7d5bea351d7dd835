package images

import (
	"fmt"
	"io"

	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// openChunk decompresses one chunk's layer stream. The puller hashes both
// streams itself, as it writes, so it takes golden's bare decompressor
// rather than Chunk.Open, which would hash them a second time.
func openChunk(c golden.Chunk, r io.Reader) (io.ReadCloser, error) {
	d, err := golden.NewDecompressor(c.Compression, r)
	if err != nil {
		return nil, fmt.Errorf("chunk %d: %w", c.Index, err)
	}
	return d, nil
}
