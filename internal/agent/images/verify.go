package images

// Verifying: every byte a pull fetches or keeps is checked against its
// digests, and a ready golden can be re-hashed whole.

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	_ "crypto/sha256" // digest algorithms
	_ "crypto/sha512"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"

	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// checkGolden refuses a golden whose chunks do not tile its disk within
// the format's limits: Parse checks as much, but the puller writes at
// these offsets and must never write outside the disk.
func checkGolden(g *golden.Golden) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", golden.ErrInvalid, fmt.Sprintf(format, a...))
	}
	if g == nil {
		return bad("nil golden")
	}
	if err := g.Manifest.Digest.Validate(); err != nil {
		return bad("manifest digest: %v", err)
	}
	size := g.DiskSize()
	if size <= 0 || size > golden.MaxDiskSize {
		return bad("disk size %d out of (0, %d]", size, golden.MaxDiskSize)
	}
	if len(g.Chunks) == 0 || len(g.Chunks) > golden.MaxChunks {
		return bad("%d chunks, want 1 to %d", len(g.Chunks), golden.MaxChunks)
	}
	var off int64
	for i, c := range g.Chunks {
		switch {
		case c.Index != i:
			return bad("chunk %d has index %d", i, c.Index)
		case c.Offset != off:
			return bad("chunk %d at offset %d, want %d", i, c.Offset, off)
		case c.Size <= 0 || c.Size > golden.MaxChunkSize:
			return bad("chunk %d size %d out of (0, %d]", i, c.Size, golden.MaxChunkSize)
		case c.Layer.Size <= 0:
			return bad("chunk %d layer size %d", i, c.Layer.Size)
		case c.Compression != golden.Zstd && c.Compression != golden.LZ4:
			return bad("chunk %d compression %q", i, c.Compression)
		}
		if err := c.Layer.Digest.Validate(); err != nil {
			return bad("chunk %d layer digest: %v", i, err)
		}
		if err := c.Digest.Validate(); err != nil {
			return bad("chunk %d digest: %v", i, err)
		}
		off += c.Size
	}
	if off != size {
		return bad("chunks cover %d bytes, disk is %d", off, size)
	}
	if s := g.AuxiliaryStorage.Size; s <= 0 || s > golden.MaxAuxSize {
		return bad("aux storage size %d out of (0, %d]", s, golden.MaxAuxSize)
	}
	if err := g.AuxiliaryStorage.Digest.Validate(); err != nil {
		return bad("aux storage digest: %v", err)
	}
	if s := g.HardwareModel.Size; s <= 0 || s > golden.MaxHardwareModel {
		return bad("hardware model size %d out of (0, %d]", s, golden.MaxHardwareModel)
	}
	if err := g.HardwareModel.Digest.Validate(); err != nil {
		return bad("hardware model digest: %v", err)
	}
	return nil
}

// fileMatches reports whether the file at path has desc's size and digest.
func fileMatches(ctx context.Context, path string, desc ocispec.Descriptor) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if fi.Size() != desc.Size {
		return false, nil
	}
	got, err := hashRegion(ctx, f, 0, desc.Size, desc.Digest.Algorithm())
	if err != nil {
		return false, err
	}
	return got == desc.Digest, nil
}

// verifyReader hashes and counts a blob's stream as it is read, refuses
// a byte past its descriptor's size, and counts progress. Its errors are
// sticky; those of the stream are *fetchError.
type verifyReader struct {
	r     io.Reader
	desc  ocispec.Descriptor
	blob  string
	chunk int
	h     hash.Hash
	n     int64
	err   error
	onN   func(int64)
}

func (r *pullRun) newVerifyReader(rc io.Reader, desc ocispec.Descriptor, blob string, chunk int) *verifyReader {
	return &verifyReader{r: rc, desc: desc, blob: blob, chunk: chunk, h: desc.Digest.Algorithm().Hash(),
		onN: func(n int64) { r.p.progress(r.name, n, true) }}
}

func (v *verifyReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if rem := v.desc.Size + 1 - v.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	k, err := v.r.Read(p)
	if k > 0 {
		v.h.Write(p[:k])
		v.n += int64(k)
		v.onN(int64(k))
	}
	switch {
	case v.n > v.desc.Size:
		v.err = v.mismatch("")
	case err == io.EOF:
		v.err = io.EOF
	case err != nil:
		what := v.blob
		if v.blob == BlobChunk {
			what = fmt.Sprintf("chunk %d", v.chunk)
		}
		v.err = &fetchError{fmt.Errorf("read %s: %w", what, err)}
	}
	return k, v.err
}

func (v *verifyReader) mismatch(got digest.Digest) *DigestMismatchError {
	return &DigestMismatchError{Blob: v.blob, Chunk: v.chunk, Stage: StageCompressed,
		Want: v.desc.Digest, Got: got, WantSize: v.desc.Size, GotSize: v.n}
}

// verify checks the stream, read to its end, against the descriptor.
func (v *verifyReader) verify() error {
	if v.err != nil && v.err != io.EOF {
		return v.err
	}
	got := digest.NewDigest(v.desc.Digest.Algorithm(), v.h)
	if v.n != v.desc.Size || got != v.desc.Digest {
		return v.mismatch(got)
	}
	return nil
}

// Verify re-hashes a ready golden against g: every chunk's region of
// disk.img, aux storage and hardware model. On a mismatch it removes the
// ready marker (the golden is no longer usable; a Pull fetches what is
// wrong again) and returns a *DigestMismatchError with Stage
// StageWritten.
func (p *Puller) Verify(ctx context.Context, name string, g *golden.Golden) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := checkGolden(g); err != nil {
		return err
	}
	dir := p.dir(name)
	if _, ok := isReady(dir, g.Manifest.Digest); !ok {
		return fmt.Errorf("%w: %s", ErrNotReady, name)
	}
	f, err := os.Open(filepath.Join(dir, DiskFile))
	if err != nil {
		return err
	}
	defer f.Close()
	eg, gctx := errgroup.WithContext(ctx)
	eg.SetLimit(p.concurrency())
	for _, c := range g.Chunks {
		eg.Go(func() error {
			got, err := hashRegion(gctx, f, c.Offset, c.Size, c.Digest.Algorithm())
			if err != nil {
				return err
			}
			if got != c.Digest {
				return &DigestMismatchError{Blob: BlobChunk, Chunk: c.Index, Stage: StageWritten,
					Want: c.Digest, Got: got, WantSize: c.Size, GotSize: c.Size}
			}
			return nil
		})
	}
	for _, b := range []struct {
		desc ocispec.Descriptor
		file string
		blob string
	}{{g.AuxiliaryStorage, AuxFile, BlobAux}, {g.HardwareModel, HardwareModelFile, BlobHardwareModel}} {
		eg.Go(func() error {
			ok, err := fileMatches(gctx, filepath.Join(dir, b.file), b.desc)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if !ok {
				return &DigestMismatchError{Blob: b.blob, Chunk: -1, Stage: StageWritten,
					Want: b.desc.Digest, WantSize: b.desc.Size, GotSize: b.desc.Size}
			}
			return nil
		})
	}
	err = eg.Wait()
	if errors.Is(err, ErrIntegrity) {
		// Keep the state so that a Pull re-verifies chunk by chunk and
		// fetches only what is wrong.
		if rmErr := os.Remove(filepath.Join(dir, readyFile)); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
			return errors.Join(err, rmErr)
		}
		p.mu.Lock()
		delete(p.statuses, name)
		p.mu.Unlock()
	}
	return err
}
