package golden

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/pierrec/lz4/v4"
	"golang.org/x/sync/errgroup"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/errdef"
)

// Source is what a golden is made of: three files of a stopped VM and its
// versions.
type Source struct {
	// Disk, AuxiliaryStorage and HardwareModel are paths: the VM's raw disk
	// image (sparse is fine), its auxiliary storage (NVRAM) and its
	// hardware model.
	Disk             string
	AuxiliaryStorage string
	HardwareModel    string
	MacOSVersion     string
	XcodeVersions    []string
	// MinimumDiskBytes is the smallest instance disk the golden fits on; 0
	// means the disk's own size.
	MinimumDiskBytes int64
}

// PushOptions tune Push; the zero value is the defaults.
type PushOptions struct {
	// ChunkSize is the uncompressed size of every chunk but the last
	// (default DefaultChunkSize).
	ChunkSize int64
	// Compression is the chunks' (default Zstd).
	Compression Compression
	// Concurrency is how many chunks are compressed and uploaded at once
	// (default 4); each holds at most one compressed chunk in memory.
	Concurrency int
	// Progress, if set, is called with the uncompressed bytes done of the
	// total (the disk, the auxiliary storage and the hardware model) as the
	// upload goes; never concurrently.
	Progress func(done, total int64)
}

// Push makes a golden of src: it cuts the disk into chunks, compresses each
// on its own, pushes every blob that dst lacks (so a push that failed half
// way resumes where it stopped), then the config and the manifest, and tags
// the manifest tag (none if tag is empty). The manifest holds no timestamp,
// so the same inputs and options make the same manifest digest. It returns
// the manifest's descriptor, whose digest pins the golden; Parse accepts
// what Push makes, and Push checks that before pushing the manifest.
func Push(ctx context.Context, dst oras.Target, tag string, src Source, opts PushOptions) (ocispec.Descriptor, error) {
	if opts.ChunkSize == 0 {
		opts.ChunkSize = DefaultChunkSize
	}
	if opts.Compression == "" {
		opts.Compression = Zstd
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 4
	}
	var diskMediaType string
	switch opts.Compression {
	case Zstd:
		diskMediaType = DiskMediaTypeZstd
	case LZ4:
		diskMediaType = DiskMediaTypeLZ4
	default:
		return ocispec.Descriptor{}, fmt.Errorf("compression %q is neither %s nor %s", opts.Compression, Zstd, LZ4)
	}
	if opts.ChunkSize < 0 || opts.ChunkSize > MaxChunkSize {
		return ocispec.Descriptor{}, fmt.Errorf("chunk size %d is not in 1..%d", opts.ChunkSize, MaxChunkSize)
	}
	if opts.Concurrency < 0 {
		return ocispec.Descriptor{}, fmt.Errorf("concurrency %d is negative", opts.Concurrency)
	}
	if !versionPattern.MatchString(src.MacOSVersion) {
		return ocispec.Descriptor{}, fmt.Errorf("macOS version %q is not a version like 15.5", src.MacOSVersion)
	}
	if len(src.XcodeVersions) == 0 {
		return ocispec.Descriptor{}, errors.New("no Xcode version given")
	}
	for _, v := range src.XcodeVersions {
		if !versionPattern.MatchString(v) {
			return ocispec.Descriptor{}, fmt.Errorf("golden: the Xcode version %q is not a version like 16.4", v)
		}
	}

	disk, err := os.Open(src.Disk)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("the disk: %w", err)
	}
	defer disk.Close()
	diskBytes, err := regularSize(disk)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("the disk %s: %w", src.Disk, err)
	}
	if diskBytes == 0 || diskBytes > MaxDiskSize {
		return ocispec.Descriptor{}, fmt.Errorf("the disk %s is %d bytes, not in 1..%d", src.Disk, diskBytes, MaxDiskSize)
	}
	chunks := (diskBytes + opts.ChunkSize - 1) / opts.ChunkSize
	if chunks > MaxChunks {
		return ocispec.Descriptor{}, fmt.Errorf("the disk %s is %d bytes: %d chunks of %d, over the limit of %d; use a larger chunk size",
			src.Disk, diskBytes, chunks, opts.ChunkSize, MaxChunks)
	}
	minimum := src.MinimumDiskBytes
	if minimum == 0 {
		minimum = diskBytes
	}
	if minimum < diskBytes || minimum > MaxDiskSize {
		return ocispec.Descriptor{}, fmt.Errorf("the minimum disk %d is not in %d (the disk's size)..%d", minimum, diskBytes, MaxDiskSize)
	}
	aux, err := openSmall(src.AuxiliaryStorage, "the auxiliary storage", AuxMediaType, MaxAuxSize)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	defer aux.Close()
	hw, err := openSmall(src.HardwareModel, "the hardware model", HardwareModelMediaType, MaxHardwareModel)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	defer hw.Close()

	prog := &progress{fn: opts.Progress, total: diskBytes + aux.size + hw.size}
	prog.add(0)

	// One compressed chunk per worker in memory: Concurrency buffers, each
	// reused from chunk to chunk.
	buffers := make(chan *bytes.Buffer, opts.Concurrency)
	for range opts.Concurrency {
		buffers <- new(bytes.Buffer)
	}
	holes := &holeCache{}
	layers := make([]ocispec.Descriptor, chunks, chunks+2)
	g, gctx := errgroup.WithContext(ctx)
	for i := range chunks {
		var buf *bytes.Buffer
		select {
		case buf = <-buffers:
		case <-gctx.Done():
		}
		if buf == nil {
			break
		}
		g.Go(func() error {
			off := i * opts.ChunkSize
			size := min(opts.ChunkSize, diskBytes-off)
			desc, err := pushChunk(gctx, dst, buf, disk, off, size, diskMediaType, opts.Compression, holes, prog)
			if err != nil {
				// A failed upload's transport may still be reading buf.
				buffers <- new(bytes.Buffer)
				return fmt.Errorf("chunk %d (bytes %d..%d): %w", i, off, off+size, err)
			}
			buffers <- buf
			layers[i] = desc
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := ctx.Err(); err != nil {
		return ocispec.Descriptor{}, err
	}
	for _, f := range []*smallFile{aux, hw} {
		desc, err := pushFile(ctx, dst, f, prog)
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		layers = append(layers, desc)
	}

	cfg := Config{
		MacOSVersion:     src.MacOSVersion,
		XcodeVersions:    src.XcodeVersions,
		MinimumDiskBytes: minimum,
		DiskBytes:        diskBytes,
		ChunkBytes:       opts.ChunkSize,
	}
	configBytes, err := json.Marshal(cfg)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	configDesc, err := pushBytes(ctx, dst, ConfigMediaType, configBytes)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("the config: %w", err)
	}
	manifest, err := json.Marshal(ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactType,
		Config:       configDesc,
		Layers:       layers,
	})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if _, err := Parse(manifest, configBytes); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("the golden made is refused by Parse (a bug): %w", err)
	}
	desc := ocispec.Descriptor{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactType,
		Digest:       digest.SHA256.FromBytes(manifest),
		Size:         int64(len(manifest)),
	}
	if tag == "" {
		err = pushIfAbsent(ctx, dst, desc, manifest)
	} else {
		_, err = oras.TagBytes(ctx, dst, desc.MediaType, manifest, tag)
	}
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("the manifest: %w", err)
	}
	return desc, nil
}

// regularSize is the size of a regular file.
func regularSize(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, errors.New("not a regular file")
	}
	return fi.Size(), nil
}

// smallFile is the auxiliary storage or the hardware model: small enough
// to be hashed, then streamed from the file.
type smallFile struct {
	*os.File
	what      string
	mediaType string
	size      int64
}

func openSmall(path, what, mediaType string, max int64) (*smallFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	size, err := regularSize(f)
	if err == nil && (size == 0 || size > max) {
		err = fmt.Errorf("%d bytes, not in 1..%d", size, max)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	return &smallFile{File: f, what: what, mediaType: mediaType, size: size}, nil
}

func pushFile(ctx context.Context, dst oras.Target, f *smallFile, prog *progress) (ocispec.Descriptor, error) {
	d := digest.SHA256.Digester()
	n, err := io.Copy(d.Hash(), io.NewSectionReader(f, 0, f.size))
	if err == nil && n != f.size {
		err = fmt.Errorf("read %d bytes of %d: the file changed", n, f.size)
	}
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("%s: %w", f.what, err)
	}
	desc := ocispec.Descriptor{MediaType: f.mediaType, Digest: d.Digest(), Size: f.size}
	if err := pushReader(ctx, dst, desc, func() io.Reader { return io.NewSectionReader(f, 0, f.size) }); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("%s: %w", f.what, err)
	}
	prog.add(f.size)
	return desc, nil
}

// pushChunk compresses one chunk into buf, hashing it both ways, and
// pushes it unless dst has it already. A chunk that is a hole of the sparse
// disk is neither read nor compressed: holes cost what the first one did.
func pushChunk(ctx context.Context, dst oras.Target, buf *bytes.Buffer, disk *os.File, off, size int64, mediaType string, comp Compression, holes *holeCache, prog *progress) (ocispec.Descriptor, error) {
	var desc ocispec.Descriptor
	var data []byte
	var err error
	if isHole(disk, off, size) {
		desc, data, err = holes.get(ctx, size, mediaType, comp)
	} else {
		desc, err = compressChunk(ctx, buf, io.NewSectionReader(disk, off, size), size, mediaType, comp)
		data = buf.Bytes()
	}
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	// Progress follows the upload, in the chunk's uncompressed bytes; a
	// blob dst had already counts whole once it is found.
	pr := &progressReader{prog: prog, ratio: float64(size) / float64(len(data)), cap: size}
	err = pushReader(ctx, dst, desc, func() io.Reader { return pr.reset(data) })
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	prog.add(pr.rest())
	return desc, nil
}

// compressChunk compresses size bytes of r into buf, one frame, and returns
// the layer's descriptor with both digests.
func compressChunk(ctx context.Context, buf *bytes.Buffer, r io.Reader, size int64, mediaType string, comp Compression) (ocispec.Descriptor, error) {
	// Room for the worst case at once (neither zstd nor LZ4 grows data by
	// more than a fraction of a percent), so that the buffer never doubles
	// past it; pages a small chunk does not write are never touched.
	buf.Reset()
	buf.Grow(int(size + size/64 + 1<<20))
	uncompressed := digest.SHA256.Digester()
	compressed := digest.SHA256.Digester()
	w, err := newCompressor(io.MultiWriter(buf, compressed.Hash()), comp)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	n, err := io.Copy(w, io.TeeReader(&ctxReader{ctx: ctx, r: r}, uncompressed.Hash()))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = fmt.Errorf("read %d bytes of %d: the disk changed", n, size)
	}
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return ocispec.Descriptor{
		MediaType: mediaType,
		Digest:    compressed.Digest(),
		Size:      int64(buf.Len()),
		Annotations: map[string]string{
			AnnotationUncompressedSize:   strconv.FormatInt(size, 10),
			AnnotationUncompressedDigest: uncompressed.Digest().String(),
		},
	}, nil
}

// holeCache is the compressed layer of an all-zero chunk of each size (two
// at most: the chunk size and the last chunk's), made once. It is the same
// bytes compressChunk makes of zeros read from the disk.
type holeCache struct {
	mu     sync.Mutex
	layers map[int64]*holeLayer
}

type holeLayer struct {
	once sync.Once
	desc ocispec.Descriptor
	data []byte
	err  error
}

func (h *holeCache) get(ctx context.Context, size int64, mediaType string, comp Compression) (ocispec.Descriptor, []byte, error) {
	h.mu.Lock()
	if h.layers == nil {
		h.layers = map[int64]*holeLayer{}
	}
	l, ok := h.layers[size]
	if !ok {
		l = &holeLayer{}
		h.layers[size] = l
	}
	h.mu.Unlock()
	l.once.Do(func() {
		var buf bytes.Buffer
		l.desc, l.err = compressChunk(ctx, &buf, io.LimitReader(zeroReader{}, size), size, mediaType, comp)
		l.data = bytes.Clone(buf.Bytes())
	})
	return l.desc, l.data, l.err
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// pushReader pushes desc's content (from open) unless dst has it.
func pushReader(ctx context.Context, dst oras.Target, desc ocispec.Descriptor, open func() io.Reader) error {
	if ok, err := dst.Exists(ctx, desc); err == nil && ok {
		return nil
	}
	err := dst.Push(ctx, desc, open())
	if errors.Is(err, errdef.ErrAlreadyExists) {
		return nil
	}
	return err
}

func pushIfAbsent(ctx context.Context, dst oras.Target, desc ocispec.Descriptor, b []byte) error {
	return pushReader(ctx, dst, desc, func() io.Reader { return bytes.NewReader(b) })
}

func pushBytes(ctx context.Context, dst oras.Target, mediaType string, b []byte) (ocispec.Descriptor, error) {
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.SHA256.FromBytes(b), Size: int64(len(b))}
	return desc, pushIfAbsent(ctx, dst, desc, b)
}

// newCompressor is one frame of comp's, written to w.
func newCompressor(w io.Writer, comp Compression) (io.WriteCloser, error) {
	switch comp {
	case Zstd:
		return zstd.NewWriter(w,
			zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderLevel(zstd.SpeedDefault),
			zstd.WithWindowSize(8<<20))
	case LZ4:
		lw := lz4.NewWriter(w)
		if err := lw.Apply(lz4.ConcurrencyOption(1), lz4.BlockSizeOption(lz4.Block4Mb), lz4.ChecksumOption(false)); err != nil {
			return nil, err
		}
		return lw, nil
	}
	return nil, fmt.Errorf("unknown compression %q", comp)
}

// ctxReader stops reading once ctx is done, so that a failed push stops
// compressing the chunks in flight.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// progress adds up the bytes done and reports them, never concurrently.
type progress struct {
	mu          sync.Mutex
	fn          func(done, total int64)
	done, total int64
}

func (p *progress) add(n int64) {
	if p == nil || p.fn == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	p.fn(p.done, p.total)
}

// progressReader counts an upload's compressed bytes, scaled to the chunk's
// uncompressed size, up to cap over every attempt. The HTTP transport may
// read it from its own goroutine, hence the lock.
type progressReader struct {
	mu      sync.Mutex
	r       io.Reader
	prog    *progress
	ratio   float64
	cap     int64
	counted int64
	read    int64
}

func (r *progressReader) reset(b []byte) io.Reader {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.r, r.read = bytes.NewReader(b), 0
	return r
}

func (r *progressReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, err := r.r.Read(p)
	r.read += int64(n)
	target := min(int64(float64(r.read)*r.ratio), r.cap)
	if err == io.EOF {
		target = r.cap
	}
	if d := target - r.counted; d > 0 {
		r.counted = target
		r.prog.add(d)
	}
	return n, err
}

// rest is what the chunk has not counted yet, and counts it.
func (r *progressReader) rest() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.cap - r.counted
	r.counted = r.cap
	return d
}
