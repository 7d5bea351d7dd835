package golden

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/memory"
)

// testSource writes a sparse disk of 3 MiB less 1234 bytes (chunk 0 half
// random and half a hole, chunk 1 a hole, chunk 2 a repeated pattern with
// a hole at the end), an auxiliary storage and a hardware model, and
// returns the source and the disk's bytes.
func testSource(t testing.TB) (Source, []byte) {
	t.Helper()
	dir := t.TempDir()
	const size = 3<<20 - 1234
	disk := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 512 << 10 {
		disk[i] = byte(rng.Uint32())
	}
	pattern := []byte("MacRack golden image chunk pattern; ")
	for i := 2 << 20; i < 2<<20+700<<10; i++ {
		disk[i] = pattern[i%len(pattern)]
	}
	f, err := os.Create(filepath.Join(dir, "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(disk[:512<<10], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(disk[2<<20:2<<20+700<<10], 2<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	aux := bytes.Repeat([]byte{0xA5, 0, 0, 1}, 64<<10)
	hw := []byte("hardware model bytes")
	if err := os.WriteFile(filepath.Join(dir, "aux.img"), aux, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hw.bin"), hw, 0o644); err != nil {
		t.Fatal(err)
	}
	return Source{
		Disk:             filepath.Join(dir, "disk.img"),
		AuxiliaryStorage: filepath.Join(dir, "aux.img"),
		HardwareModel:    filepath.Join(dir, "hw.bin"),
		MacOSVersion:     "15.5",
		XcodeVersions:    []string{"16.4"},
		MinimumDiskBytes: 100 << 30,
	}, disk
}

// reassemble fetches every chunk of g from src through Chunk.Fetch and
// returns the disk.
func reassemble(t *testing.T, src content.Fetcher, g *Golden) []byte {
	t.Helper()
	disk := make([]byte, g.DiskSize())
	for _, c := range g.Chunks {
		rc, err := c.Fetch(context.Background(), src)
		if err != nil {
			t.Fatalf("chunk %d: %v", c.Index, err)
		}
		n, err := io.ReadFull(rc, disk[c.Offset:c.Offset+c.Size])
		if err != nil {
			t.Fatalf("chunk %d: read %d: %v", c.Index, n, err)
		}
		if m, err := rc.Read(make([]byte, 1)); m != 0 || err != io.EOF {
			t.Fatalf("chunk %d: after its bytes: %d, %v, want io.EOF", c.Index, m, err)
		}
		rc.Close()
	}
	return disk
}

func TestPushThenResolveInMemory(t *testing.T) {
	for _, comp := range []Compression{Zstd, LZ4} {
		t.Run(string(comp), func(t *testing.T) {
			ctx := context.Background()
			src, want := testSource(t)
			store := memory.New()
			var calls int
			var last, total int64
			desc, err := Push(ctx, store, "15.5", src, PushOptions{
				ChunkSize: 1 << 20, Compression: comp, Concurrency: 2,
				Progress: func(done, tot int64) {
					calls++
					if done < last || done > tot {
						t.Errorf("progress went %d -> %d of %d", last, done, tot)
					}
					last, total = done, tot
				},
			})
			if err != nil {
				t.Fatalf("Push: %v", err)
			}
			if calls == 0 || last != total || total != int64(len(want))+256<<10+20 {
				t.Errorf("progress: %d calls, ended at %d of %d", calls, last, total)
			}
			g, err := Resolve(ctx, store, "15.5")
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if g.Manifest.Digest != desc.Digest {
				t.Errorf("resolved %s, pushed %s", g.Manifest.Digest, desc.Digest)
			}
			if len(g.Chunks) != 3 || g.Config.ChunkBytes != 1<<20 || g.Config.MinimumDiskBytes != 100<<30 {
				t.Fatalf("%d chunks, config %+v", len(g.Chunks), g.Config)
			}
			for _, c := range g.Chunks {
				if c.Compression != comp {
					t.Errorf("chunk %d is %s", c.Index, c.Compression)
				}
			}
			// The hole compresses to almost nothing.
			if g.Chunks[1].Layer.Size > 8<<10 {
				t.Errorf("the all-zero chunk compressed to %d bytes", g.Chunks[1].Layer.Size)
			}
			if got := reassemble(t, store, g); !bytes.Equal(got, want) {
				t.Fatalf("the reassembled disk differs")
			}
			// The same inputs make the same manifest.
			again, err := Push(ctx, store, "again", src, PushOptions{ChunkSize: 1 << 20, Compression: comp})
			if err != nil || again.Digest != desc.Digest {
				t.Errorf("a second push: %s, %v; want %s", again.Digest, err, desc.Digest)
			}
		})
	}
}

func TestASparseAndADenseDiskMakeTheSameGolden(t *testing.T) {
	for _, comp := range []Compression{Zstd, LZ4} {
		t.Run(string(comp), func(t *testing.T) {
			ctx := context.Background()
			sparse, disk := testSource(t)
			f, err := os.Open(sparse.Disk)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("chunk 1 is a hole to SEEK_DATA: %v, chunk 0: %v", isHole(f, 1<<20, 1<<20), isHole(f, 0, 1<<20))
			f.Close()
			dense := sparse
			dense.Disk = filepath.Join(t.TempDir(), "dense.img")
			if err := os.WriteFile(dense.Disk, disk, 0o644); err != nil {
				t.Fatal(err)
			}
			opts := PushOptions{ChunkSize: 1 << 20, Compression: comp}
			a, err := Push(ctx, memory.New(), "", sparse, opts)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Push(ctx, memory.New(), "", dense, opts)
			if err != nil {
				t.Fatal(err)
			}
			if a.Digest != b.Digest {
				t.Errorf("sparse %s, dense %s", a.Digest, b.Digest)
			}
		})
	}
}

func TestAWholeHoleDiskPushes(t *testing.T) {
	src, _ := testSource(t)
	src.Disk = filepath.Join(t.TempDir(), "hole.img")
	f, err := os.Create(src.Disk)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(10<<20 + 5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	store := memory.New()
	if _, err := Push(context.Background(), store, "holes", src, PushOptions{ChunkSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	g, err := Resolve(context.Background(), store, "holes")
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Chunks) != 11 || g.Chunks[10].Size != 5 || g.Chunks[0].Layer.Digest != g.Chunks[9].Layer.Digest {
		t.Fatalf("%d chunks, the last of %d bytes", len(g.Chunks), g.Chunks[len(g.Chunks)-1].Size)
	}
	if got := reassemble(t, store, g); !bytes.Equal(got, make([]byte, 10<<20+5)) {
		t.Fatal("the disk is not all zeros")
	}
}

func TestPushRefusesBadSources(t *testing.T) {
	src, _ := testSource(t)
	cases := []struct {
		name string
		bend func(*Source, *PushOptions)
		want string
	}{
		{"a bad macOS version", func(s *Source, _ *PushOptions) { s.MacOSVersion = "fifteen" }, `"fifteen"`},
		{"no Xcode", func(s *Source, _ *PushOptions) { s.XcodeVersions = nil }, "no Xcode"},
		{"a minimum below the disk", func(s *Source, _ *PushOptions) { s.MinimumDiskBytes = 1 << 20 }, "minimum disk"},
		{"no disk", func(s *Source, _ *PushOptions) { s.Disk = filepath.Join(t.TempDir(), "none") }, "the disk"},
		{"a directory for a disk", func(s *Source, _ *PushOptions) { s.Disk = t.TempDir() }, "not a regular file"},
		{"an empty hardware model", func(s *Source, _ *PushOptions) {
			s.HardwareModel = filepath.Join(t.TempDir(), "empty")
			os.WriteFile(s.HardwareModel, nil, 0o644)
		}, "hardware model"},
		{"too many chunks", func(_ *Source, o *PushOptions) { o.ChunkSize = 512 }, "use a larger chunk size"},
		{"chunks over 4 GiB", func(_ *Source, o *PushOptions) { o.ChunkSize = MaxChunkSize + 1 }, "chunk size"},
		{"gzip", func(_ *Source, o *PushOptions) { o.Compression = "gzip" }, "gzip"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, o := src, PushOptions{ChunkSize: 1 << 20}
			tc.bend(&s, &o)
			_, err := Push(context.Background(), memory.New(), "x", s, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Push: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// compressed is one chunk compressed with comp, and its Chunk.
func compressed(t testing.TB, data []byte, comp Compression) (Chunk, []byte) {
	t.Helper()
	var buf bytes.Buffer
	w, err := newCompressor(&buf, comp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	mt := DiskMediaTypeZstd
	if comp == LZ4 {
		mt = DiskMediaTypeLZ4
	}
	return Chunk{
		Layer:       ocispec.Descriptor{MediaType: mt, Digest: digest.SHA256.FromBytes(buf.Bytes()), Size: int64(buf.Len())},
		Size:        int64(len(data)),
		Digest:      digest.SHA256.FromBytes(data),
		Compression: comp,
	}, buf.Bytes()
}

type failingReader struct {
	r     io.Reader
	after int
	err   error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.after <= 0 {
		return 0, f.err
	}
	if len(p) > f.after {
		p = p[:f.after]
	}
	n, err := f.r.Read(p)
	f.after -= n
	return n, err
}

func TestChunkOpenChecksEverything(t *testing.T) {
	data := make([]byte, 300<<10)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 100 << 10 {
		data[i] = byte(rng.Uint32())
	}
	errNetwork := errors.New("connection reset by peer")
	for _, comp := range []Compression{Zstd, LZ4} {
		t.Run(string(comp), func(t *testing.T) {
			c, z := compressed(t, data, comp)
			read := func(c Chunk, r io.Reader) ([]byte, error) {
				rc, err := OpenChunk(c, r)
				if err != nil {
					return nil, err
				}
				defer rc.Close()
				return io.ReadAll(rc)
			}
			// The positive control.
			got, err := read(c, bytes.NewReader(z))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("a good chunk: %d bytes, %v", len(got), err)
			}
			flipped := bytes.Clone(z)
			flipped[len(flipped)/2] ^= 0x40
			wrongDigest := c
			wrongDigest.Digest = digest.SHA256.FromString("other")
			short := c
			short.Size--
			long := c
			long.Size++
			trailing := c
			trailing.Layer.Size++
			trailing.Layer.Digest = digest.SHA256.FromBytes(append(bytes.Clone(z), 0))
			cases := []struct {
				name    string
				c       Chunk
				r       io.Reader
				corrupt bool
			}{
				{"a flipped byte", c, bytes.NewReader(flipped), true},
				{"a truncated layer", c, bytes.NewReader(z[:len(z)-10]), true},
				{"the wrong uncompressed digest", wrongDigest, bytes.NewReader(z), true},
				{"more bytes than its size", short, bytes.NewReader(z), true},
				{"fewer bytes than its size", long, bytes.NewReader(z), true},
				{"trailing bytes after the frame", trailing, bytes.NewReader(append(bytes.Clone(z), 0)), true},
				{"garbage", c, bytes.NewReader(bytes.Repeat([]byte{7}, len(z))), true},
				{"a network error", c, &failingReader{r: bytes.NewReader(z), after: len(z) / 2, err: errNetwork}, false},
			}
			for _, tc := range cases {
				got, err := read(tc.c, tc.r)
				if err == nil {
					t.Errorf("%s: read %d bytes without error", tc.name, len(got))
					continue
				}
				if errors.Is(err, ErrCorrupt) != tc.corrupt {
					t.Errorf("%s: %v; wraps ErrCorrupt: %v, want %v", tc.name, err, errors.Is(err, ErrCorrupt), tc.corrupt)
				}
				if int64(len(got)) > tc.c.Size {
					t.Errorf("%s: yielded %d bytes of a %d-byte chunk", tc.name, len(got), tc.c.Size)
				}
				if !tc.corrupt && !errors.Is(err, errNetwork) {
					t.Errorf("%s: %v does not wrap the reader's error", tc.name, err)
				}
			}
		})
	}
}
