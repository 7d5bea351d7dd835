package images

// The pull pipeline's stages, one by one and whole, against the real
// registry on loopback, on the same blobs: a 256 MiB disk (about 60%
// random, 40% zeros, in 1 MiB runs) pushed once as 32 MiB chunks with zstd
// and once with LZ4, when the first benchmark that needs it runs.
//
//	go test -run '^$' -bench . -benchtime 3x ./internal/agent/images/
//
// BenchmarkCloneSparseGolden clones in a temporary directory, or under
// $MACRACK_BENCH_CLONE_DIR (a reflink filesystem, to measure FICLONE).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/boualleiguie/macrack-operator/internal/golden"
	"github.com/boualleiguie/macrack-operator/test/registry"
)

// TestMain stops the benchmarks' shared registry, and removes its
// storage, once every test and benchmark has run.
func TestMain(m *testing.M) {
	code := m.Run()
	pipelineFx.close()
	os.Exit(code)
}

const (
	pipelineDiskBytes  = 256 << 20
	pipelineChunkBytes = 32 << 20
)

var pipelineComps = []golden.Compression{golden.Zstd, golden.LZ4}

// pipelineGolden is one push of the benchmark disk, and its chunk blobs in
// memory.
type pipelineGolden struct {
	ref             string
	g               *golden.Golden
	blobs           [][]byte // compressed, by chunk index
	compressedBytes int64    // the chunks' layers
}

type pipelineFixture struct {
	once    sync.Once
	err     error
	dir     string
	reg     *registry.Server
	disk    []byte   // the disk, uncompressed
	chunks  [][]byte // slices of disk, by chunk index
	goldens map[golden.Compression]*pipelineGolden
}

var pipelineFx pipelineFixture

// pipeline returns the shared fixture, made on first use.
func pipeline(b *testing.B) *pipelineFixture {
	b.Helper()
	fx := &pipelineFx
	fx.once.Do(func() {
		start := time.Now()
		fx.err = fx.setup()
		if fx.err == nil {
			b.Logf("pipeline fixture: pushed %d MiB twice in %s (zstd %.1f%%, lz4 %.1f%% of the disk)", pipelineDiskBytes>>20,
				time.Since(start).Round(time.Millisecond),
				100*float64(fx.goldens[golden.Zstd].compressedBytes)/pipelineDiskBytes,
				100*float64(fx.goldens[golden.LZ4].compressedBytes)/pipelineDiskBytes)
		}
	})
	if fx.err != nil {
		b.Fatalf("pipeline fixture: %v", fx.err)
	}
	return fx
}

// pipelineDisk is size bytes in 1 MiB runs, each random with probability
// 0.6 and zeros otherwise, deterministic.
func pipelineDisk(size int) []byte {
	d := make([]byte, size)
	rng := rand.New(rand.NewPCG(42, 4242))
	fill := rand.NewChaCha8([32]byte{'m', 'a', 'c', 'r', 'a', 'c', 'k'})
	for off := 0; off < size; off += 1 << 20 {
		if rng.IntN(10) < 6 {
			fill.Read(d[off:min(off+1<<20, size)])
		}
	}
	return d
}

func (fx *pipelineFixture) setup() error {
	dir, err := os.MkdirTemp("", "macrack-pipeline-bench-")
	if err != nil {
		return err
	}
	fx.dir = dir
	if fx.reg, err = registry.Start(filepath.Join(dir, "registry")); err != nil {
		return err
	}
	fx.disk = pipelineDisk(pipelineDiskBytes)
	src := golden.Source{Disk: filepath.Join(dir, "disk.img"), AuxiliaryStorage: filepath.Join(dir, "aux.img"),
		HardwareModel: filepath.Join(dir, "hardware-model"), MacOSVersion: "15.5", XcodeVersions: []string{"16.4"}}
	f, err := os.Create(src.Disk)
	if err != nil {
		return err
	}
	if err = f.Truncate(pipelineDiskBytes); err == nil {
		_, err = writeSparse(f, fx.disk, 0) // zeros stay holes, as on a real golden's disk
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(src.AuxiliaryStorage, bytes.Repeat([]byte{0xA5}, 64<<10), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(src.HardwareModel, []byte("bplist00 bench hardware model"), 0o644); err != nil {
		return err
	}
	ctx := context.Background()
	fx.goldens = map[golden.Compression]*pipelineGolden{}
	for _, comp := range pipelineComps {
		name := fx.reg.Host() + "/bench/" + string(comp)
		repo, err := golden.Repository(name, golden.RemoteOptions{PlainHTTP: true})
		if err != nil {
			return err
		}
		desc, err := golden.Push(ctx, repo, "", src, golden.PushOptions{ChunkSize: pipelineChunkBytes, Compression: comp, Concurrency: 2})
		if err != nil {
			return fmt.Errorf("push %s: %w", comp, err)
		}
		pg := &pipelineGolden{ref: name + "@" + desc.Digest.String()}
		if pg.g, err = golden.Resolve(ctx, repo, pg.ref); err != nil {
			return err
		}
		for _, c := range pg.g.Chunks {
			rc, err := repo.Fetch(ctx, c.Layer)
			if err != nil {
				return err
			}
			blob, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return err
			}
			pg.blobs = append(pg.blobs, blob)
			pg.compressedBytes += c.Layer.Size
		}
		fx.goldens[comp] = pg
	}
	for _, c := range fx.goldens[golden.Zstd].g.Chunks {
		fx.chunks = append(fx.chunks, fx.disk[c.Offset:c.Offset+c.Size])
	}
	return nil
}

func (fx *pipelineFixture) close() {
	if fx.reg != nil {
		fx.reg.Stop()
	}
	if fx.dir != "" {
		os.RemoveAll(fx.dir)
	}
}

// BenchmarkStageFetch is the raw fetch of every chunk blob from the
// registry, into io.Discard, c blobs at once. Bytes are compressed.
func BenchmarkStageFetch(b *testing.B) {
	fx := pipeline(b)
	for _, comp := range pipelineComps {
		pg := fx.goldens[comp]
		for _, conc := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/c%d", comp, conc), func(b *testing.B) {
				repo, err := golden.Repository(pg.ref, golden.RemoteOptions{PlainHTTP: true})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				b.SetBytes(pg.compressedBytes)
				b.ResetTimer()
				for range b.N {
					var eg errgroup.Group
					eg.SetLimit(conc)
					for _, c := range pg.g.Chunks {
						eg.Go(func() error {
							rc, err := repo.Fetch(ctx, c.Layer)
							if err != nil {
								return err
							}
							defer rc.Close()
							n, err := io.Copy(io.Discard, rc)
							if err == nil && n != c.Layer.Size {
								err = fmt.Errorf("chunk %d: %d bytes, want %d", c.Index, n, c.Layer.Size)
							}
							return err
						})
					}
					if err := eg.Wait(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkStageSHA256 is sha256 over the compressed blobs and over the
// uncompressed chunks, in memory: the two checks every chunk passes.
func BenchmarkStageSHA256(b *testing.B) {
	fx := pipeline(b)
	sum := func(b *testing.B, data [][]byte) {
		var n int64
		for _, d := range data {
			n += int64(len(d))
		}
		b.SetBytes(n)
		b.ResetTimer()
		for range b.N {
			for _, d := range data {
				h := sha256.New()
				h.Write(d)
				h.Sum(nil)
			}
		}
	}
	for _, comp := range pipelineComps {
		b.Run("compressed-"+string(comp), func(b *testing.B) { sum(b, fx.goldens[comp].blobs) })
	}
	b.Run("uncompressed", func(b *testing.B) { sum(b, fx.chunks) })
}

// BenchmarkStageDecompress is the decompression of every chunk, from and
// to memory, with the puller's decoders. Bytes are uncompressed.
func BenchmarkStageDecompress(b *testing.B) {
	fx := pipeline(b)
	for _, comp := range pipelineComps {
		pg := fx.goldens[comp]
		b.Run(string(comp), func(b *testing.B) {
			buf := make([]byte, bufSize)
			b.SetBytes(pg.g.DiskSize())
			b.ResetTimer()
			for range b.N {
				for _, c := range pg.g.Chunks {
					dec, err := openChunk(c, bytes.NewReader(pg.blobs[c.Index]))
					if err != nil {
						b.Fatal(err)
					}
					n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{dec}, buf)
					dec.Close()
					if err != nil || n != c.Size {
						b.Fatalf("chunk %d: %d bytes, %v", c.Index, n, err)
					}
				}
			}
			b.ReportMetric(float64(pg.compressedBytes)*float64(b.N)/b.Elapsed().Seconds()/1e6, "compMB/s")
		})
	}
}

// BenchmarkStageSparseWrite is the zero-skipping write of the uncompressed
// chunks, in the puller's 1 MiB buffers, into a fresh sparse file: into the
// page cache only, and synced to the device as the puller syncs disk.img.
// Bytes are uncompressed.
func BenchmarkStageSparseWrite(b *testing.B) {
	fx := pipeline(b)
	for _, sync := range []bool{false, true} {
		b.Run(map[bool]string{false: "page-cache", true: "fsync"}[sync], func(b *testing.B) {
			dir := b.TempDir()
			var written int64
			b.SetBytes(pipelineDiskBytes)
			b.ResetTimer()
			for i := range b.N {
				path := filepath.Join(dir, fmt.Sprintf("disk-%d.img", i))
				f, err := os.Create(path)
				if err != nil {
					b.Fatal(err)
				}
				if err := f.Truncate(pipelineDiskBytes); err != nil {
					b.Fatal(err)
				}
				written = 0
				off := int64(0)
				for _, c := range fx.chunks {
					for p := 0; p < len(c); p += bufSize {
						n, err := writeSparse(f, c[p:min(p+bufSize, len(c))], off+int64(p))
						if err != nil {
							b.Fatal(err)
						}
						written += n
					}
					off += int64(len(c))
				}
				if sync {
					if err := f.Sync(); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if !sync {
					f.Sync() // not timed, so that the next write is not slowed by this one's writeback
				}
				f.Close()
				os.Remove(path)
				b.StartTimer()
			}
			b.ReportMetric(100*float64(written)/pipelineDiskBytes, "%written")
		})
	}
}

// BenchmarkPipeline is the whole Puller.Pull from the registry into a fresh
// root each time: fetch, sha256, decompress, sha256, sparse write, sync,
// state and ready marker. Bytes are the disk's (uncompressed); compMB/s is
// the rate on the wire.
func BenchmarkPipeline(b *testing.B) {
	fx := pipeline(b)
	for _, comp := range pipelineComps {
		pg := fx.goldens[comp]
		for _, conc := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("%s/c%d", comp, conc), func(b *testing.B) {
				repo, err := golden.Repository(pg.ref, golden.RemoteOptions{PlainHTTP: true})
				if err != nil {
					b.Fatal(err)
				}
				base := b.TempDir()
				var syncs syncTime
				b.SetBytes(pg.g.DiskSize())
				b.ResetTimer()
				for i := range b.N {
					root := filepath.Join(base, fmt.Sprint(i))
					p := &Puller{Root: root, Concurrency: conc, Log: logr.Discard()}
					p.wrapDisk = func(f *os.File) diskFile { return timedSync{File: f, t: &syncs} }
					if err := p.Pull(context.Background(), "img", pg.g, repo); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					os.RemoveAll(root)
					b.StartTimer()
				}
				b.ReportMetric(float64(bytesTotal(pg.g))*float64(b.N)/b.Elapsed().Seconds()/1e6, "compMB/s")
				b.ReportMetric(syncs.get().Seconds()/float64(b.N), "sync-s/op")
			})
		}
	}
}

// syncTime adds up the time disk.img's fsyncs take.
type syncTime struct {
	mu sync.Mutex
	d  time.Duration
}

func (s *syncTime) get() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.d
}

// timedSync is disk.img with its Sync timed; the *os.File stays
// reachable, so hole punching and SEEK_DATA work as without it.
type timedSync struct {
	*os.File
	t *syncTime
}

func (f timedSync) Sync() error {
	start := time.Now()
	err := f.File.Sync()
	f.t.mu.Lock()
	f.t.d += time.Since(start)
	f.t.mu.Unlock()
	return err
}

// BenchmarkCloneSparseGolden clones a 10 GiB sparse golden holding 1 GiB of
// data (1024 runs of 1 MiB, 10 MiB apart) by SparseCopy and by FSCloner
// (FICLONE where the filesystem has reflinks, else SparseCopy), and checks
// that the copy allocates what the source does (st_blocks*512).
func BenchmarkCloneSparseGolden(b *testing.B) {
	const size, run, stride = 10 << 30, 1 << 20, 10 << 20
	dir := b.TempDir()
	if d := os.Getenv("MACRACK_BENCH_CLONE_DIR"); d != "" {
		var err error
		if dir, err = os.MkdirTemp(d, "clone-bench-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
	}
	src := filepath.Join(dir, "golden.img")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		b.Fatal(err)
	}
	fill := rand.NewChaCha8([32]byte{'c', 'l', 'o', 'n', 'e'})
	buf := make([]byte, run)
	for off := int64(0); off < size; off += stride {
		fill.Read(buf)
		if _, err := f.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	srcAlloc := allocated(b, src)
	b.Logf("source %s: %d bytes, %d allocated", src, int64(size), srcAlloc)
	for _, tc := range []struct {
		name string
		cl   Cloner
	}{{"sparse-copy", SparseCopier{}}, {"fs-cloner", FSCloner{Log: logr.Discard()}}} {
		b.Run(tc.name, func(b *testing.B) {
			var method Method
			var dstAlloc, fsGrew int64
			b.ResetTimer()
			for i := range b.N {
				dst := filepath.Join(dir, fmt.Sprintf("%s-%d.img", tc.name, i))
				b.StopTimer()
				before := fsUsed(b, dir)
				b.StartTimer()
				m, err := tc.cl.Clone(src, dst)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				fsGrew = fsUsed(b, dir) - before
				method = m
				dstAlloc = allocated(b, dst)
				if dstAlloc != srcAlloc {
					b.Errorf("%s: the copy allocates %d bytes, the source %d", m, dstAlloc, srcAlloc)
				}
				checkCloneSample(b, src, dst, size, stride)
				os.Remove(dst)
				b.StartTimer()
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/clone")
			b.ReportMetric(float64(srcAlloc)/(1<<20), "srcAllocMiB")
			b.ReportMetric(float64(dstAlloc)/(1<<20), "dstAllocMiB")
			// What the filesystem lost to the copy: a reflink shares the
			// source's blocks (its st_blocks counts them all the same).
			b.ReportMetric(float64(fsGrew)/(1<<20), "fsUsedMiB/clone")
			b.Logf("%s: method %s", tc.name, method)
		})
	}
}

// fsUsed is the bytes in use on the filesystem holding dir once what was
// removed is freed: XFS frees in the background, even past a sync, so it
// reads until two readings 20 ms apart agree (3 s at most).
func fsUsed(b *testing.B, dir string) int64 {
	b.Helper()
	read := func() int64 {
		unix.Sync() // a statement: it returns nothing on Linux, an error on darwin
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			b.Fatal(err)
		}
		return (int64(st.Blocks) - int64(st.Bfree)) * int64(st.Bsize)
	}
	last := read()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		n := read()
		if n == last {
			break
		}
		last = n
	}
	return last
}

// checkCloneSample compares the copy with the source on a few data runs
// and holes.
func checkCloneSample(b *testing.B, src, dst string, size, stride int64) {
	b.Helper()
	s, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	d, err := os.Open(dst)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if fi, err := d.Stat(); err != nil || fi.Size() != size {
		b.Fatalf("the copy is %v bytes (%v), want %d", fi.Size(), err, size)
	}
	want, got := make([]byte, 2<<20), make([]byte, 2<<20)
	for _, off := range []int64{0, 7 * stride, size/2 - 1<<20, size - 2<<20} {
		if _, err := s.ReadAt(want, off); err != nil {
			b.Fatal(err)
		}
		if _, err := d.ReadAt(got, off); err != nil {
			b.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			b.Fatalf("the copy differs at %d", off)
		}
	}
}
