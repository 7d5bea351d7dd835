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
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"
	"oras.land/oras-go/v2/content"

	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// DefaultConcurrency is how many blobs a pull fetches at once.
const DefaultConcurrency = 4

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

// run is one download; it settles the image's Status and, on an
// integrity failure or a full disk, discards its bytes.
func (p *Puller) run(ctx context.Context, name string, g *golden.Golden, src content.Fetcher) error {
	log := p.Log.WithValues("image", name, "manifest", g.Manifest.Digest)
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
		log.Info("Golden ready", "bytes", bytesTotal(g), "seconds", took.Seconds())
		p.countPull(name, took, p.clock().Now())
		p.setPhase(name, PhaseReady, "")
		return nil
	case errors.Is(err, ErrIntegrity), errors.Is(err, ErrDiskFull):
		rmErr := removeDir(r.dir)
		msg := err.Error() + "; partial download discarded"
		if rmErr != nil {
			msg += fmt.Sprintf(" (removing it failed: %v)", rmErr)
		}
		log.Error(err, "Golden pull failed; partial download discarded")
		p.setPhase(name, PhaseFailed, msg)
		return err
	case ctx.Err() != nil:
		log.Info("Golden pull interrupted; partial download kept for resume", "reason", err.Error())
		p.setPhase(name, PhaseFailed, "interrupted: "+err.Error()+"; partial download kept for resume")
		return ctx.Err()
	default:
		log.Error(err, "Golden pull failed; partial download kept for resume")
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
		r.log.Info("Cached pull state is another golden's; starting over", "had", st.Manifest)
		st = nil
	case errors.Is(err, fs.ErrNotExist):
		st = nil
	default:
		r.log.Info("Unreadable pull state; starting over", "error", err.Error())
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
		r.log.Info("Resuming golden pull", "chunksKept", len(r.verified), "chunks", len(g.Chunks))
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
