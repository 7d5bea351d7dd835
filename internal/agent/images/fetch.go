package images

// Fetching: a pull's chunks and blobs from the registry, each retried
// with backoff after a transient error, decompressed into its place.

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// Backoff is how a pull waits between retries of a blob after a transient
// registry error (connection refused or reset, timeout, unexpected EOF,
// 5xx, 429). The zero value takes the defaults.
type Backoff struct {
	// Initial is the first wait (default 1s); each next one is Factor
	// (default 2) times longer, up to Max (default 1m).
	Initial time.Duration
	Max     time.Duration
	Factor  float64
	// Jitter adds up to this fraction of each wait at random (0: none).
	Jitter float64
	// Retries is how many times one blob is retried (default 8); a
	// negative value retries never.
	Retries int
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = time.Second
	}
	if b.Max <= 0 {
		b.Max = time.Minute
	}
	if b.Factor < 1 {
		b.Factor = 2
	}
	if b.Retries == 0 {
		b.Retries = 8
	}
	return b
}

// delay is the wait before retry number try+1.
func (b Backoff) delay(try int) time.Duration {
	d := float64(b.Initial) * math.Pow(b.Factor, float64(try))
	if d > float64(b.Max) {
		d = float64(b.Max)
	}
	if b.Jitter > 0 {
		d += d * b.Jitter * rand.Float64()
	}
	return time.Duration(d)
}

// chunk brings one chunk to disk: a kept chunk that re-verifies is left
// alone, any other is fetched.
func (r *pullRun) chunk(ctx context.Context, disk diskFile, c golden.Chunk, fresh, kept bool) error {
	if kept {
		if r.p.onRehash != nil {
			r.p.onRehash(c.Index)
		}
		got, err := hashRegion(ctx, disk, c.Offset, c.Size, c.Digest.Algorithm())
		if err != nil {
			return fmt.Errorf("re-verify chunk %d: %w", c.Index, err)
		}
		if got == c.Digest {
			r.p.progress(r.name, c.Layer.Size, false)
			return nil
		}
		r.log.Info("Kept chunk failed re-verification; fetching it again", "chunk", c.Index, "got", got)
		if err := r.markChunk(c.Index, false); err != nil {
			return err
		}
		fresh = false
	}
	label := fmt.Sprintf("chunk %d", c.Index)
	return r.withRetry(ctx, label, func(ctx context.Context) (int64, error) {
		n, err := r.fetchChunk(ctx, disk, c, fresh)
		fresh = false // a failed attempt may have written bytes
		return n, err
	})
}

// withRetry runs attempt until it succeeds, fails for good, or the
// retries run out. attempt returns the bytes it counted as done, which a
// failed attempt takes back.
func (r *pullRun) withRetry(ctx context.Context, label string, attempt func(context.Context) (int64, error)) error {
	b := r.p.Backoff.withDefaults()
	for try := 0; ; try++ {
		n, err := attempt(ctx)
		if err == nil {
			if try > 0 {
				r.p.clearRetry(r.name, label)
			}
			return nil
		}
		r.p.progress(r.name, -n, false)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retryable(err) || b.Retries < 0 || try >= b.Retries {
			return err
		}
		d := b.delay(try)
		r.log.Info("Transient registry error; retrying", "blob", label, "error", err.Error(), "attempt", try+1, "in", d.String())
		r.p.setRetry(r.name, label, fmt.Sprintf("retrying: %v (attempt %d of %d, in %s)", err, try+2, b.Retries+1, d))
		t := r.p.clock().NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
}

// fetchChunk fetches, checks and writes one chunk once. fresh says its
// region of disk.img is known to read as zeros.
func (r *pullRun) fetchChunk(ctx context.Context, disk diskFile, c golden.Chunk, fresh bool) (int64, error) {
	sparse, dirty := true, !fresh && regionHasData(disk, c.Offset, c.Size)
	if dirty {
		// Zero skipping needs the region to read as zeros.
		if err := punchHole(disk, c.Offset, c.Size); err != nil {
			r.log.V(1).Info("Cannot punch a hole; writing the chunk in full", "chunk", c.Index, "error", err.Error())
			sparse = false
		}
	}
	alg := c.Digest.Algorithm()
	if !alg.Available() || !c.Layer.Digest.Algorithm().Available() {
		return 0, fmt.Errorf("chunk %d: digest algorithm unavailable", c.Index)
	}
	rc, err := r.src.Fetch(ctx, c.Layer)
	if err != nil {
		return 0, &fetchError{fmt.Errorf("fetch chunk %d: %w", c.Index, err)}
	}
	defer rc.Close()
	vr := r.newVerifyReader(rc, c.Layer, BlobChunk, c.Index)
	dec, err := openChunk(c, vr)
	if err != nil {
		return vr.n, err
	}
	defer dec.Close()

	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	uh := alg.Hash()
	var n int64
	var decErr, sizeErr error
	for {
		if err := ctx.Err(); err != nil {
			return vr.n, err
		}
		k, err := readFull(dec, buf)
		if k > 0 {
			if n+int64(k) > c.Size {
				// Not a byte past the chunk's end is written.
				sizeErr = &DigestMismatchError{Blob: BlobChunk, Chunk: c.Index, Stage: StageUncompressed,
					Want: c.Digest, WantSize: c.Size, GotSize: c.Size + 1}
				break
			}
			uh.Write(buf[:k])
			var werr error
			if sparse {
				_, werr = writeSparse(disk, buf[:k], c.Offset+n)
			} else {
				_, werr = disk.WriteAt(buf[:k], c.Offset+n)
			}
			if werr != nil {
				if isNoSpace(werr) {
					return vr.n, diskFull(fmt.Sprintf("write chunk %d", c.Index), werr)
				}
				return vr.n, fmt.Errorf("write chunk %d: %w", c.Index, werr)
			}
			n += int64(k)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			decErr = err
			break
		}
	}
	// Read the compressed stream to its end and check it first: a bad
	// blob explains whatever went wrong after it, and a registry error
	// (which the decompressor may have wrapped or hidden) is retried.
	if _, err := io.Copy(io.Discard, vr); err != nil {
		return vr.n, err
	}
	if err := vr.verify(); err != nil {
		return vr.n, err
	}
	if decErr != nil {
		return vr.n, &CorruptChunkError{Chunk: c.Index, Err: decErr}
	}
	if sizeErr != nil {
		return vr.n, sizeErr
	}
	got := digest.NewDigest(alg, uh)
	if n != c.Size {
		return vr.n, &DigestMismatchError{Blob: BlobChunk, Chunk: c.Index, Stage: StageUncompressed,
			Want: c.Digest, Got: got, WantSize: c.Size, GotSize: n}
	}
	if got != c.Digest {
		return vr.n, &DigestMismatchError{Blob: BlobChunk, Chunk: c.Index, Stage: StageUncompressed,
			Want: c.Digest, Got: got, WantSize: c.Size, GotSize: n}
	}
	startWriteback(disk, c.Offset, c.Size)
	if dirty || r.p.VerifyWrites {
		onDisk, err := hashRegion(ctx, disk, c.Offset, c.Size, alg)
		if err != nil {
			return vr.n, fmt.Errorf("read back chunk %d: %w", c.Index, err)
		}
		if onDisk != c.Digest {
			return vr.n, &DigestMismatchError{Blob: BlobChunk, Chunk: c.Index, Stage: StageWritten,
				Want: c.Digest, Got: onDisk, WantSize: c.Size, GotSize: c.Size}
		}
	}
	return vr.n, r.markChunk(c.Index, true)
}

// readFull reads into buf until it is full or r fails; unlike
// io.ReadFull it returns r's error as it is (io.EOF at the end).
func readFull(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
		if k == 0 {
			// A reader making no progress: let the caller try again.
			return n, nil
		}
	}
	return n, nil
}

// blob fetches aux storage or the hardware model into file (by a
// temporary file renamed over it), checked against desc.
func (r *pullRun) blob(ctx context.Context, desc ocispec.Descriptor, file, label string, kept bool, mark func(*pullState, bool)) error {
	path := filepath.Join(r.dir, file)
	setMark := func(v bool) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		mark(r.st, v)
		return r.saveStateLocked()
	}
	if kept {
		if ok, err := fileMatches(ctx, path, desc); err == nil && ok {
			r.p.progress(r.name, desc.Size, false)
			return nil
		} else if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		r.log.Info("Kept blob failed re-verification; fetching it again", "blob", label)
		if err := setMark(false); err != nil {
			return err
		}
	}
	return r.withRetry(ctx, label, func(ctx context.Context) (int64, error) {
		n, err := r.fetchBlob(ctx, desc, path, label)
		if err != nil {
			return n, err
		}
		return n, setMark(true)
	})
}

func (r *pullRun) fetchBlob(ctx context.Context, desc ocispec.Descriptor, path, label string) (int64, error) {
	if !desc.Digest.Algorithm().Available() {
		return 0, fmt.Errorf("%s: digest algorithm unavailable", label)
	}
	rc, err := r.src.Fetch(ctx, desc)
	if err != nil {
		return 0, &fetchError{fmt.Errorf("fetch %s: %w", label, err)}
	}
	defer rc.Close()
	vr := r.newVerifyReader(rc, desc, label, -1)
	tmp := path + ".partial"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		if isNoSpace(err) {
			return 0, diskFull("create "+filepath.Base(tmp), err)
		}
		return 0, err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		if err := ctx.Err(); err != nil {
			return vr.n, err
		}
		k, rerr := readFull(vr, buf)
		if k > 0 {
			if _, err := f.Write(buf[:k]); err != nil {
				if isNoSpace(err) {
					return vr.n, diskFull("write "+label, err)
				}
				return vr.n, err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return vr.n, rerr
		}
	}
	if err := vr.verify(); err != nil {
		return vr.n, err
	}
	if err := f.Sync(); err != nil {
		if isNoSpace(err) {
			return vr.n, diskFull("sync "+label, err)
		}
		return vr.n, err
	}
	if err := f.Close(); err != nil {
		return vr.n, err
	}
	ok = true
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return vr.n, err
	}
	return vr.n, nil
}
