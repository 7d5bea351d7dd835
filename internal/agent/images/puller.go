// Package images is the host agent's cache of golden images: it pulls a
// golden (see package golden) into <Root>/<name>/ as a sparse disk.img,
// aux.img and hardware-model, verifying every byte on every pull; it
// keeps the cache within a byte budget by evicting the least recently
// used goldens; and it clones a golden's disk for an instance.
//
// The pull follows Tart's (DiskV2): chunks are fetched in parallel and
// decompressed straight into their offsets of a file truncated to the
// disk's size, 64 KiB runs of zeros are not written, and an interrupted
// pull resumes. Unlike Tart, each chunk's compressed stream is checked
// against its layer descriptor and its decompressed bytes against its
// annotations on every pull, a chunk kept from an interrupted pull is
// re-hashed on disk before it is trusted, and a golden is only usable
// once a ready marker, written last, says all of it verified.
package images

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	_ "crypto/sha256" // digest algorithms
	_ "crypto/sha512"

	"github.com/go-logr/logr"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"
	"oras.land/oras-go/v2/content"

	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// DefaultConcurrency is how many blobs a pull fetches at once.
const DefaultConcurrency = 4

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

// Puller pulls goldens into the cache directory <Root>/<name>/. The zero
// value of every field but Root is usable; a Puller must not be copied
// after first use.
type Puller struct {
	// Root is the cache's directory.
	Root string
	// Concurrency is how many blobs are fetched at once (default 4).
	Concurrency int
	// Clock drives backoff waits and Status.Rate (default: real time).
	Clock clock.Clock
	Log   logr.Logger
	// Backoff paces retries of transient registry errors.
	Backoff Backoff
	// RateWindow is the window Status.Rate is measured over (default
	// 10s).
	RateWindow time.Duration
	// VerifyWrites re-reads every chunk from disk.img once written and
	// checks it against its digest. A chunk written over a region that
	// held bytes (a resumed or retried chunk) is always re-read.
	VerifyWrites bool
	// Space, when set, is asked for the free space before a pull writes
	// a byte; the pull is refused with ErrDiskFull when EstimatedSize
	// does not fit.
	Space Space
	// Cache, when set, keeps a golden being pulled from eviction. The
	// budget is the Store's: it makes room before it calls Pull.
	Cache *Cache

	mu       sync.Mutex
	active   map[string]*download
	statuses map[string]*imageStatus
	// counters are every golden's pull counters, for the report.
	counters map[string]*pullCounters

	// Test hooks.
	wrapDisk func(*os.File) diskFile
	onRehash func(chunk int)
}

// diskFile is what a pull needs of disk.img.
type diskFile interface {
	io.ReaderAt
	io.WriterAt
	Truncate(size int64) error
	Sync() error
	Close() error
}

// download is one pull in flight, shared by every Pull of its name.
type download struct {
	manifest digest.Digest
	done     chan struct{}
	err      error
	refs     int
	cancel   context.CancelFunc
}

type imageStatus struct {
	st       Status
	meter    rateMeter
	retrying string // the blob whose retry Message shows
}

// Pull materialises g into <Root>/<name>/ from src, or returns at once
// when it is there and ready. Concurrent Pulls of one name share one
// download and its result; the download stops when every one of them has
// given up (its context done), and then leaves its partial state for a
// later Pull to resume. A Pull of another golden under a name being
// pulled returns ErrBusy; once that pull is over, a Pull of another
// golden under the name replaces it (so give each golden version a name
// of its own, e.g. from its manifest digest, if instances may be cloning
// the old one meanwhile).
//
// Errors: ErrIntegrity (a *DigestMismatchError or *CorruptChunkError) or
// ErrDiskFull, after which the partial bytes are gone; the context's
// error; a *NoRoomError; a registry error that was not transient or
// outlasted the retries; golden.ErrInvalid for a golden it refuses.
func (p *Puller) Pull(ctx context.Context, name string, g *golden.Golden, src content.Fetcher) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := checkGolden(g); err != nil {
		return err
	}
	if src == nil {
		return errors.New("images: Pull with a nil fetcher")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if m, ok := isReady(p.dir(name), g.Manifest.Digest); ok {
		p.setReady(name, m)
		return nil
	}
	for {
		p.mu.Lock()
		p.init()
		d := p.active[name]
		switch {
		case d == nil:
			dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			d = &download{manifest: g.Manifest.Digest, done: make(chan struct{}), refs: 1, cancel: cancel}
			p.active[name] = d
			p.mu.Unlock()
			go p.download(dctx, d, name, g, src)
			return p.wait(ctx, d)
		case d.refs > 0 && d.manifest == g.Manifest.Digest:
			d.refs++
			p.mu.Unlock()
			return p.wait(ctx, d)
		case d.refs > 0:
			p.mu.Unlock()
			return fmt.Errorf("%w: %s is pulling %s", ErrBusy, name, d.manifest)
		}
		// A download every caller gave up on: let it stop, then start
		// again.
		p.mu.Unlock()
		select {
		case <-d.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (p *Puller) init() {
	if p.active == nil {
		p.active = make(map[string]*download)
		p.statuses = make(map[string]*imageStatus)
	}
}

func (p *Puller) wait(ctx context.Context, d *download) error {
	select {
	case <-d.done:
		return d.err
	case <-ctx.Done():
	}
	p.mu.Lock()
	d.refs--
	last := d.refs == 0
	p.mu.Unlock()
	if last {
		// Stop cleanly before returning, so that a Pull after this one
		// resumes from a state nothing writes any more.
		d.cancel()
		<-d.done
	}
	return ctx.Err()
}

func (p *Puller) download(ctx context.Context, d *download, name string, g *golden.Golden, src content.Fetcher) {
	defer d.cancel()
	err := p.run(ctx, name, g, src)
	p.mu.Lock()
	d.err = err
	delete(p.active, name)
	p.mu.Unlock()
	close(d.done)
}

// Ready reports whether <Root>/<name>/ holds golden manifest, complete
// and verified.
func (p *Puller) Ready(name string, manifest digest.Digest) bool {
	if checkName(name) != nil || manifest == "" {
		return false
	}
	_, ok := isReady(p.dir(name), manifest)
	return ok
}

func (p *Puller) dir(name string) string { return filepath.Join(p.Root, name) }

func (p *Puller) clock() clock.Clock {
	if p.Clock == nil {
		return clock.RealClock{}
	}
	return p.Clock
}

func (p *Puller) concurrency() int {
	if p.Concurrency <= 0 {
		return DefaultConcurrency
	}
	return p.Concurrency
}

// EstimatedSize is the space a pull of g may need: every chunk's
// uncompressed size (the whole disk), plus aux storage and hardware model
// and a block per file. It overestimates what the pull allocates, often
// by far: runs of 64 KiB of zeros are never written and stay holes, and
// a macOS disk is mostly free space, but which runs are zeros is only
// known once a chunk is decompressed (a golden could carry its allocated
// size for a tighter estimate).
func EstimatedSize(g *golden.Golden) int64 {
	const block = 4096
	var n int64
	for _, c := range g.Chunks {
		n += c.Size
	}
	n += (g.AuxiliaryStorage.Size + block - 1) / block * block
	n += (g.HardwareModel.Size + block - 1) / block * block
	return n + 4*block // disk.img's tail, state, ready and last-used
}

// bytesTotal counts the compressed bytes of a pull.
func bytesTotal(g *golden.Golden) int64 {
	n := g.AuxiliaryStorage.Size + g.HardwareModel.Size
	for _, c := range g.Chunks {
		n += c.Layer.Size
	}
	return n
}

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

// run is one download; it settles the image's Status and, on an
// integrity failure or a full disk, discards its bytes.
func (p *Puller) run(ctx context.Context, name string, g *golden.Golden, src content.Fetcher) error {
	log := p.Log.WithValues("golden", name, "manifest", g.Manifest.Digest)
	p.startStatus(name, g)
	if p.Cache != nil {
		p.Cache.acquire(name)
		defer p.Cache.release(name)
	}
	r := &pullRun{p: p, log: log, name: name, dir: p.dir(name), g: g, src: src}
	start := p.clock().Now()
	err := r.pull(ctx)
	switch {
	case err == nil:
		took := p.clock().Since(start)
		log.Info("golden ready", "bytes", bytesTotal(g), "seconds", took.Seconds())
		p.countPull(name, took, p.clock().Now())
		p.setPhase(name, PhaseReady, "")
		return nil
	case errors.Is(err, ErrIntegrity), errors.Is(err, ErrDiskFull):
		rmErr := removeDir(r.dir)
		msg := err.Error() + "; partial download discarded"
		if rmErr != nil {
			msg += fmt.Sprintf(" (removing it failed: %v)", rmErr)
		}
		log.Error(err, "golden pull failed; partial download discarded")
		p.setPhase(name, PhaseFailed, msg)
		return err
	case ctx.Err() != nil:
		log.Info("golden pull interrupted; partial download kept for resume", "reason", err.Error())
		p.setPhase(name, PhaseFailed, "interrupted: "+err.Error()+"; partial download kept for resume")
		return ctx.Err()
	default:
		log.Error(err, "golden pull failed; partial download kept for resume")
		p.setPhase(name, PhaseFailed, err.Error()+"; partial download kept for resume")
		return err
	}
}

// pullRun is the state of one download.
type pullRun struct {
	p    *Puller
	log  logr.Logger
	name string
	dir  string
	g    *golden.Golden
	src  content.Fetcher

	mu       sync.Mutex
	st       *pullState
	verified map[int]bool
}

func (r *pullRun) pull(ctx context.Context) error {
	g, dir := r.g, r.dir
	if _, ok := isReady(dir, g.Manifest.Digest); ok {
		return nil
	}
	st, err := readState(dir)
	switch {
	case err == nil && st.Manifest == g.Manifest.Digest && st.DiskSize == g.DiskSize() && st.Chunks == len(g.Chunks):
		// Resume, unless a ready marker says the directory is another
		// golden's.
		if m, rerr := readReady(dir); rerr == nil && m.Manifest != g.Manifest.Digest {
			st = nil
		}
	case err == nil:
		r.log.Info("cached state is another golden's; starting over", "had", st.Manifest)
		st = nil
	case errors.Is(err, fs.ErrNotExist):
		st = nil
	default:
		r.log.Info("unreadable pull state; starting over", "error", err.Error())
		st = nil
	}
	if st == nil {
		if err := removeDir(dir); err != nil {
			return fmt.Errorf("clear %s: %w", dir, err)
		}
		st = &pullState{Manifest: g.Manifest.Digest, DiskSize: g.DiskSize(), Chunks: len(g.Chunks)}
	}
	r.st, r.verified = st, st.verifiedSet()

	if err := r.p.checkSpace(ctx, r); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		if isNoSpace(err) {
			return diskFull("create "+dir, err)
		}
		return err
	}
	if err := r.saveState(); err != nil {
		return err
	}

	diskPath := filepath.Join(dir, DiskFile)
	_, statErr := os.Lstat(diskPath)
	fresh := errors.Is(statErr, fs.ErrNotExist)
	f, err := os.OpenFile(diskPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		if isNoSpace(err) {
			return diskFull("create "+DiskFile, err)
		}
		return err
	}
	var disk diskFile = f
	if r.p.wrapDisk != nil {
		disk = r.p.wrapDisk(f)
	}
	defer disk.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != g.DiskSize() {
		if err := disk.Truncate(g.DiskSize()); err != nil {
			if isNoSpace(err) {
				return diskFull("truncate "+DiskFile, err)
			}
			return err
		}
	}
	if !fresh {
		r.log.Info("resuming golden pull", "chunksKept", len(r.verified), "chunks", len(g.Chunks))
	}

	eg, gctx := errgroup.WithContext(ctx)
	eg.SetLimit(r.p.concurrency())
	r.mu.Lock()
	auxKept, hwKept := st.Aux, st.HardwareModel
	r.mu.Unlock()
	eg.Go(func() error {
		return r.blob(gctx, g.AuxiliaryStorage, AuxFile, BlobAux, auxKept, func(s *pullState, v bool) { s.Aux = v })
	})
	eg.Go(func() error {
		return r.blob(gctx, g.HardwareModel, HardwareModelFile, BlobHardwareModel, hwKept,
			func(s *pullState, v bool) { s.HardwareModel = v })
	})
	for _, c := range g.Chunks {
		if gctx.Err() != nil {
			break
		}
		r.mu.Lock()
		kept := r.verified[c.Index]
		r.mu.Unlock()
		eg.Go(func() error { return r.chunk(gctx, disk, c, fresh, kept) })
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	if err := disk.Sync(); err != nil {
		if isNoSpace(err) {
			return diskFull("sync "+DiskFile, err)
		}
		return err
	}
	now := r.p.clock().Now()
	if err := touchFile(filepath.Join(dir, lastUsedFile), now); err != nil {
		if isNoSpace(err) {
			return diskFull("write "+lastUsedFile, err)
		}
		return err
	}
	// Last: the marker that makes the golden usable.
	err = writeJSONAtomic(filepath.Join(dir, readyFile), readyMarker{
		Manifest: g.Manifest.Digest, DiskSize: g.DiskSize(), BytesTotal: bytesTotal(g), ReadyAt: now.UTC(),
	}, true)
	if isNoSpace(err) {
		return diskFull("write "+readyFile, err)
	}
	return err
}

// checkSpace refuses a pull that would not fit the free space, before it
// writes a byte.
func (p *Puller) checkSpace(ctx context.Context, r *pullRun) error {
	if p.Space == nil {
		return ctx.Err()
	}
	need := EstimatedSize(r.g)
	if have, err := allocatedBytes(r.dir); err == nil {
		need = max(need-have, 0)
	}
	free, err := p.Space.Free(p.Root)
	if err != nil {
		return fmt.Errorf("free space of %s: %w", p.Root, err)
	}
	if free < need {
		return fmt.Errorf("%w: the golden needs up to %d bytes, %d free on %s", ErrDiskFull, need, free, p.Root)
	}
	return ctx.Err()
}

func (r *pullRun) saveState() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.saveStateLocked()
}

func (r *pullRun) saveStateLocked() error {
	r.st.setVerified(r.verified)
	err := writeJSONAtomic(filepath.Join(r.dir, stateFile), r.st, false)
	if isNoSpace(err) {
		return diskFull("write "+stateFile, err)
	}
	return err
}

func (r *pullRun) markChunk(i int, ok bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.verified[i] = true
	} else {
		delete(r.verified, i)
	}
	return r.saveStateLocked()
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
		r.log.Info("kept chunk failed re-verification; fetching it again", "chunk", c.Index, "got", got)
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
		r.log.Info("transient registry error; retrying", "blob", label, "error", err.Error(), "attempt", try+1, "in", d.String())
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
			r.log.V(1).Info("cannot punch a hole; writing the chunk in full", "chunk", c.Index, "error", err.Error())
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
		r.log.Info("kept blob failed re-verification; fetching it again", "blob", label)
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

// Status bookkeeping.

func (p *Puller) startStatus(name string, g *golden.Golden) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	w := p.RateWindow
	if w <= 0 {
		w = DefaultRateWindow
	}
	p.statuses[name] = &imageStatus{
		st:    Status{Name: name, Manifest: g.Manifest.Digest, Phase: PhasePulling, BytesTotal: bytesTotal(g)},
		meter: rateMeter{window: w},
	}
}

func (p *Puller) setReady(name string, m *readyMarker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	s := p.statuses[name]
	if s == nil || s.st.Phase != PhasePulling {
		p.statuses[name] = &imageStatus{st: Status{Name: name, Manifest: m.Manifest, Phase: PhaseReady,
			BytesDone: m.BytesTotal, BytesTotal: m.BytesTotal}}
	}
}

// progress counts n bytes done (negative: taken back); moved says they
// crossed the network (for Rate).
func (p *Puller) progress(name string, n int64, moved bool) {
	if n == 0 {
		return
	}
	now := p.clock().Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.statuses[name]
	if s == nil {
		return
	}
	s.st.BytesDone += n
	if moved && n > 0 {
		s.meter.add(now, n)
		p.counter(name, now).bytes += n
	}
}

func (p *Puller) setPhase(name string, phase Phase, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.statuses[name]
	if s == nil {
		return
	}
	s.st.Phase, s.st.Message, s.retrying = phase, msg, ""
	if phase == PhaseReady {
		s.st.BytesDone = s.st.BytesTotal
	}
}

func (p *Puller) setRetry(name, label, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.statuses[name]; s != nil {
		s.st.Message, s.retrying = msg, label
	}
}

func (p *Puller) clearRetry(name, label string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.statuses[name]; s != nil && s.retrying == label {
		s.st.Message, s.retrying = "", ""
	}
}

// Progress is the status of one image: its pull in progress or its last
// pull's outcome in this process, else what its directory says (ready,
// or an incomplete download a Pull will resume). Phase is empty for a
// name neither knows.
func (p *Puller) Progress(name string) Status {
	if checkName(name) != nil {
		return Status{Name: name}
	}
	st, ok := p.memStatus(name)
	if !ok {
		st = diskStatus(p.dir(name), name)
	}
	if st.Phase != "" {
		st.AllocatedBytes, _ = allocatedBytes(p.dir(name))
	}
	return st
}

// memStatus is the in-memory status of name, unless it says Ready and
// the directory no longer does (the cache evicted it).
func (p *Puller) memStatus(name string) (Status, bool) {
	p.mu.Lock()
	s := p.statuses[name]
	var st Status
	if s != nil {
		st = s.st
		if st.Phase == PhasePulling {
			st.Rate = s.meter.rate(p.clock().Now())
		}
	}
	p.mu.Unlock()
	if s == nil {
		return Status{}, false
	}
	if st.Phase == PhaseReady {
		if _, ok := isReady(p.dir(name), st.Manifest); !ok {
			return Status{}, false
		}
	}
	return st, true
}

func diskStatus(dir, name string) Status {
	if m, ok := isReady(dir, ""); ok {
		return Status{Name: name, Manifest: m.Manifest, Phase: PhaseReady, BytesDone: m.BytesTotal, BytesTotal: m.BytesTotal}
	}
	if _, err := os.Lstat(dir); err != nil {
		return Status{Name: name}
	}
	st := Status{Name: name, Phase: PhaseFailed, Message: "incomplete download; a Pull resumes it"}
	if s, err := readState(dir); err == nil {
		st.Manifest = s.Manifest
	}
	return st
}

// Statuses lists every image in the cache directory, and every image
// this Puller pulled or is pulling, by name.
func (p *Puller) Statuses() []Status {
	names := map[string]bool{}
	p.mu.Lock()
	for n := range p.statuses {
		names[n] = true
	}
	p.mu.Unlock()
	if ents, err := os.ReadDir(p.Root); err == nil {
		for _, e := range ents {
			if e.IsDir() && checkName(e.Name()) == nil {
				names[e.Name()] = true
			}
		}
	}
	out := make([]Status, 0, len(names))
	for n := range names {
		if st := p.Progress(n); st.Phase != "" {
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
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
