package golden

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	"github.com/pierrec/lz4/v4"
	"oras.land/oras-go/v2/content"
)

// ErrCorrupt is wrapped by every error that says a chunk's bytes are not
// what the manifest pins: the compressed layer's size or digest, a stream
// that does not decompress, or the decompressed size or digest. Fetching the
// chunk again may help (a blob damaged in transit); the same registry blob
// failing twice is damaged where it is stored. An error that does not wrap
// ErrCorrupt came from reading the compressed bytes (the network, the
// registry), not from the bytes themselves.
var ErrCorrupt = errors.New("golden chunk corrupt")

// zstdMaxWindow is the largest zstd window a chunk may need to decompress:
// Push's encoder uses a few MiB; a frame that asks for more than this is
// refused rather than allocated.
const zstdMaxWindow = 128 << 20

// NewDecompressor reads the decompressed bytes of a stream compressed with
// comp, under the limits every chunk is read with: one goroutine, and a
// zstd window of at most 128 MiB. It checks nothing else: Chunk.Open does.
func NewDecompressor(comp Compression, compressed io.Reader) (io.ReadCloser, error) {
	switch comp {
	case Zstd:
		d, err := zstd.NewReader(compressed,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(zstdMaxWindow),
			zstd.WithDecoderMaxMemory(uint64(MaxChunkSize)))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	case LZ4:
		d := lz4.NewReader(compressed)
		if err := d.Apply(lz4.ConcurrencyOption(1)); err != nil {
			return nil, err
		}
		return io.NopCloser(d), nil
	}
	return nil, fmt.Errorf("unknown compression %q", comp)
}

// OpenChunk is c.Open(compressed).
func OpenChunk(c Chunk, compressed io.Reader) (io.ReadCloser, error) {
	return c.Open(compressed)
}

// Open returns the decompressed bytes of the chunk whose compressed layer
// compressed reads, from the start. Everything is checked on the way: the
// compressed bytes against c.Layer's size and digest, and the decompressed
// bytes against c.Size and c.Digest. It never yields more than c.Size bytes;
// a mismatch is an error wrapping ErrCorrupt in place of io.EOF, so a reader
// that reaches io.EOF has read exactly the chunk. The caller should write
// the bytes somewhere they are not yet trusted, and trust them only on
// io.EOF. Close releases the decompressor; it does not close compressed.
func (c Chunk) Open(compressed io.Reader) (io.ReadCloser, error) {
	if c.Size <= 0 || c.Layer.Size <= 0 {
		return nil, fmt.Errorf("chunk %d: sizes %d (uncompressed) and %d (compressed) must be positive", c.Index, c.Size, c.Layer.Size)
	}
	if err := checkDigest(c.Digest); err != nil {
		return nil, fmt.Errorf("chunk %d: uncompressed digest %q: %w", c.Index, c.Digest, err)
	}
	if err := checkDigest(c.Layer.Digest); err != nil {
		return nil, fmt.Errorf("chunk %d: layer digest %q: %w", c.Index, c.Layer.Digest, err)
	}
	src := &sourceReader{r: compressed}
	r := &chunkReader{
		c:      c,
		src:    src,
		verify: content.NewVerifyReader(src, c.Layer),
		hash:   digest.SHA256.Hash(),
	}
	dec, err := NewDecompressor(c.Compression, r.verify)
	if err != nil {
		return nil, fmt.Errorf("chunk %d: %w", c.Index, err)
	}
	r.dec, r.close = dec, func() { _ = dec.Close() }
	return r, nil
}

// Fetch fetches the chunk's layer from src and returns c.Open of it; Close
// closes the fetch too.
func (c Chunk) Fetch(ctx context.Context, src content.Fetcher) (io.ReadCloser, error) {
	rc, err := src.Fetch(ctx, c.Layer)
	if err != nil {
		return nil, fmt.Errorf("chunk %d: fetching %s: %w", c.Index, c.Layer.Digest, err)
	}
	r, err := c.Open(rc)
	if err != nil {
		rc.Close()
		return nil, err
	}
	cr := r.(*chunkReader)
	inner := cr.close
	cr.close = func() {
		if inner != nil {
			inner()
		}
		rc.Close()
	}
	return cr, nil
}

// sourceReader remembers the compressed source's own error (the network,
// the registry), so that it is not mistaken for corrupt bytes.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

type chunkReader struct {
	c      Chunk
	src    *sourceReader
	verify *content.VerifyReader
	dec    io.Reader
	close  func()
	hash   hash.Hash
	n      int64
	err    error
}

func (r *chunkReader) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: chunk %d (layer %s): %s", ErrCorrupt, r.c.Index, r.c.Layer.Digest, fmt.Sprintf(format, args...))
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	// Never more than the chunk: one byte past it is read only to learn
	// that it is there.
	if left := r.c.Size - r.n; int64(len(p)) > left+1 {
		p = p[:left+1]
	}
	n, err := r.dec.Read(p)
	if r.n+int64(n) > r.c.Size {
		n = int(r.c.Size - r.n)
		err = r.corrupt("it decompresses to more than its %d bytes", r.c.Size)
	}
	r.hash.Write(p[:n])
	r.n += int64(n)
	switch {
	case err == nil:
		return n, nil
	case err == io.EOF:
		err = r.finish()
	case errors.Is(err, ErrCorrupt):
	case r.src.err != nil:
		err = fmt.Errorf("chunk %d (layer %s): reading the layer: %w", r.c.Index, r.c.Layer.Digest, r.src.err)
	default:
		err = r.corrupt("%v", err)
	}
	r.err = err
	return n, err
}

// finish checks the whole chunk once the decompressor has ended.
func (r *chunkReader) finish() error {
	if r.n != r.c.Size {
		return r.corrupt("it decompresses to %d bytes, not %d", r.n, r.c.Size)
	}
	// The layer must end where the stream did, and hash to its digest.
	if _, err := io.Copy(io.Discard, r.verify); err != nil {
		if r.src.err != nil {
			return fmt.Errorf("chunk %d (layer %s): reading the layer: %w", r.c.Index, r.c.Layer.Digest, r.src.err)
		}
		return r.corrupt("%v", err)
	}
	if err := r.verify.Verify(); err != nil {
		if r.src.err != nil {
			return fmt.Errorf("chunk %d (layer %s): reading the layer: %w", r.c.Index, r.c.Layer.Digest, r.src.err)
		}
		return r.corrupt("the layer: %v", err)
	}
	if got := digest.NewDigest(digest.SHA256, r.hash); got != r.c.Digest {
		return r.corrupt("it decompresses to digest %s, not %s", got, r.c.Digest)
	}
	return io.EOF
}

func (r *chunkReader) Close() error {
	if r.close != nil {
		r.close()
		r.close = nil
	}
	if r.err == nil {
		r.err = errors.New("read after close")
	}
	return nil
}
