package images

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/pierrec/lz4/v4"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/memory"

	"github.com/boualleiguie/macrack-operator/internal/golden"
)

const testChunk = 256 << 10

// testGolden is a golden built in memory: its disk, blobs and store.
type testGolden struct {
	g      *golden.Golden
	disk   []byte
	aux    []byte
	hw     []byte
	blobs  map[digest.Digest][]byte
	store  *memory.Store
	chunks [][]byte // compressed, by index
}

// makeDisk builds a disk of size bytes: zero regions, random regions and
// compressible text, deterministic for a seed.
func makeDisk(size int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	d := make([]byte, size)
	for off := 0; off < size; {
		n := min(size-off, 32<<10+rng.IntN(400<<10))
		switch rng.IntN(4) {
		case 0, 1: // zeros (most of a real disk)
		case 2:
			for i := off; i < off+n; i += 8 {
				v := rng.Uint64()
				for j := 0; j < 8 && i+j < off+n; j++ {
					d[i+j] = byte(v >> (8 * j))
				}
			}
		case 3:
			copy(d[off:off+n], bytes.Repeat([]byte("macrack golden disk "), n/20+1))
		}
		off += n
	}
	return d
}

func compress(t testing.TB, comp golden.Compression, data []byte, level int) []byte {
	t.Helper()
	var buf bytes.Buffer
	switch comp {
	case golden.Zstd:
		w, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.EncoderLevel(level)), zstd.WithEncoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	case golden.LZ4:
		w := lz4.NewWriter(&buf)
		if level > 1 {
			w.Apply(lz4.CompressionLevelOption(lz4.Level9))
		}
		w.Write(data)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// buildGolden chunks disk into chunkSize chunks, compressing chunk i with
// comps[i%len(comps)], and pushes every blob into a memory store.
func buildGolden(t testing.TB, disk []byte, chunkSize int, comps ...golden.Compression) *testGolden {
	t.Helper()
	if len(comps) == 0 {
		comps = []golden.Compression{golden.Zstd, golden.LZ4}
	}
	ctx := context.Background()
	tg := &testGolden{disk: disk, blobs: map[digest.Digest][]byte{}, store: memory.New()}
	push := func(mt string, b []byte) ocispec.Descriptor {
		d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(b), Size: int64(len(b))}
		if _, ok := tg.blobs[d.Digest]; !ok {
			if err := tg.store.Push(ctx, d, bytes.NewReader(b)); err != nil {
				t.Fatal(err)
			}
		}
		tg.blobs[d.Digest] = b
		return d
	}
	g := &golden.Golden{Config: golden.Config{MacOSVersion: "15.5", DiskBytes: int64(len(disk)), ChunkBytes: int64(chunkSize)}}
	for i, off := 0, 0; off < len(disk); i, off = i+1, off+chunkSize {
		data := disk[off:min(off+chunkSize, len(disk))]
		comp := comps[i%len(comps)]
		z := compress(t, comp, data, 1)
		mt := golden.DiskMediaTypeZstd
		if comp == golden.LZ4 {
			mt = golden.DiskMediaTypeLZ4
		}
		g.Chunks = append(g.Chunks, golden.Chunk{Index: i, Offset: int64(off), Layer: push(mt, z),
			Size: int64(len(data)), Digest: digest.FromBytes(data), Compression: comp})
		tg.chunks = append(tg.chunks, z)
	}
	rng := rand.New(rand.NewPCG(uint64(len(disk)), 7))
	tg.aux = make([]byte, 96<<10+123)
	for i := range tg.aux {
		tg.aux[i] = byte(rng.Uint32())
	}
	tg.hw = []byte("hardware-model-" + fmt.Sprint(len(disk)))
	g.AuxiliaryStorage = push(golden.AuxMediaType, tg.aux)
	g.HardwareModel = push(golden.HardwareModelMediaType, tg.hw)
	m, _ := json.Marshal(g)
	g.Manifest = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: golden.ArtifactType,
		Digest: digest.FromBytes(m), Size: int64(len(m))}
	tg.g = g
	return tg
}

// fetcher wraps a store: it counts fetches by digest and lets a test
// replace or break any of them.
type fetcher struct {
	src content.Fetcher
	// hook, when it returns handled, answers the fetch instead of src;
	// attempt counts from 1 per digest.
	hook func(ctx context.Context, desc ocispec.Descriptor, attempt int) (rc io.ReadCloser, err error, handled bool)

	mu     sync.Mutex
	counts map[digest.Digest]int
}

func newFetcher(src content.Fetcher) *fetcher {
	return &fetcher{src: src, counts: map[digest.Digest]int{}}
}

func (f *fetcher) Fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	f.mu.Lock()
	f.counts[desc.Digest]++
	n := f.counts[desc.Digest]
	hook := f.hook
	f.mu.Unlock()
	if hook != nil {
		if rc, err, ok := hook(ctx, desc, n); ok {
			return rc, err
		}
	}
	return f.src.Fetch(ctx, desc)
}

func (f *fetcher) count(d digest.Digest) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[d]
}

func (f *fetcher) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.counts {
		n += c
	}
	return n
}

func (f *fetcher) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts = map[digest.Digest]int{}
}

// errAfterReader yields data then fails with err (nil: clean EOF).
type errAfterReader struct {
	data []byte
	err  error
	// before, when set, runs once just before the error is returned.
	before func()
}

func (r *errAfterReader) Read(p []byte) (int, error) {
	if len(r.data) > 0 {
		n := copy(p, r.data)
		r.data = r.data[n:]
		return n, nil
	}
	if r.before != nil {
		r.before()
		r.before = nil
	}
	if r.err == nil {
		return 0, io.EOF
	}
	return 0, r.err
}

func (r *errAfterReader) Close() error { return nil }

func bytesReader(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// checkPulled asserts that <root>/<name>/ holds tg exactly.
func checkPulled(t *testing.T, root, name string, tg *testGolden) {
	t.Helper()
	dir := filepath.Join(root, name)
	for _, f := range []struct {
		file string
		want []byte
	}{{DiskFile, tg.disk}, {AuxFile, tg.aux}, {HardwareModelFile, tg.hw}} {
		got, err := os.ReadFile(filepath.Join(dir, f.file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, f.want) {
			t.Fatalf("%s/%s differs from the source (%d bytes, want %d)", name, f.file, len(got), len(f.want))
		}
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func allocated(t testing.TB, path string) int64 {
	t.Helper()
	n, err := allocatedBytes(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
