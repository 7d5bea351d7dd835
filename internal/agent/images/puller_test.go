package images

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// testDisk is 2 MiB and change: nine 256 KiB chunks, the last of them
// 10000 bytes, so a chunk's tail is shorter than 64 KiB.
func testDisk(seed uint64) []byte { return makeDisk(8*testChunk+10000, seed) }

func newPuller(t *testing.T, root string) *Puller {
	return &Puller{Root: root, Log: testr.New(t), Backoff: Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond}}
}

// wantCounts is the fetches a pull of chunks (by index) plus aux and
// hardware model (when blobs) makes, by digest (identical chunks share a
// blob).
func wantCounts(tg *testGolden, chunks []int, blobs bool) map[digest.Digest]int {
	m := map[digest.Digest]int{}
	for _, i := range chunks {
		m[tg.g.Chunks[i].Layer.Digest]++
	}
	if blobs {
		m[tg.g.AuxiliaryStorage.Digest]++
		m[tg.g.HardwareModel.Digest]++
	}
	return m
}

func checkCounts(t *testing.T, f *fetcher, want map[digest.Digest]int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for d, n := range want {
		if f.counts[d] != n {
			t.Errorf("blob %s fetched %d times, want %d", d.Encoded()[:12], f.counts[d], n)
		}
	}
	for d, n := range f.counts {
		if _, ok := want[d]; !ok && n > 0 {
			t.Errorf("blob %s fetched %d times, want 0", d.Encoded()[:12], n)
		}
	}
}

func allChunks(tg *testGolden) []int {
	var s []int
	for i := range tg.g.Chunks {
		s = append(s, i)
	}
	return s
}

func TestPullFresh(t *testing.T) {
	for _, tc := range []struct {
		name  string
		disk  []byte
		comps []golden.Compression
	}{
		{"mixed", testDisk(1), nil},
		{"zstd", testDisk(2), []golden.Compression{golden.Zstd}},
		{"lz4", testDisk(3), []golden.Compression{golden.LZ4}},
		// A tail chunk shorter than 64 KiB, zero and not zero.
		{"zero-tail", append(makeDisk(4*testChunk, 4), make([]byte, 1000)...), nil},
		{"data-tail", append(make([]byte, 4*testChunk), bytes.Repeat([]byte{7}, 1000)...), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tg := buildGolden(t, tc.disk, testChunk, tc.comps...)
			f := newFetcher(tg.store)
			p := newPuller(t, root)
			if p.Ready("img", tg.g.Manifest.Digest) {
				t.Fatal("ready before the pull")
			}
			if err := p.Pull(context.Background(), "img", tg.g, f); err != nil {
				t.Fatal(err)
			}
			checkPulled(t, root, "img", tg)
			checkCounts(t, f, wantCounts(tg, allChunks(tg), true))
			if !p.Ready("img", tg.g.Manifest.Digest) {
				t.Fatal("not ready after the pull")
			}
			if p.Ready("img", digest.FromString("other")) {
				t.Fatal("ready for another manifest")
			}
			disk := filepath.Join(root, "img", DiskFile)
			var nonZero int64
			for off := 0; off < len(tc.disk); off += HoleSize {
				if !isZero(tc.disk[off:min(off+HoleSize, len(tc.disk))]) {
					nonZero += HoleSize
				}
			}
			if a := allocated(t, disk); a >= int64(len(tc.disk)) || a > nonZero+64<<10 {
				t.Errorf("disk.img allocates %d bytes of %d; %d bytes are in non-zero 64 KiB blocks", a, len(tc.disk), nonZero)
			}
			st := p.Progress("img")
			if st.Phase != PhaseReady || st.BytesDone != st.BytesTotal || st.BytesTotal != bytesTotal(tg.g) || st.AllocatedBytes == 0 {
				t.Errorf("status %+v", st)
			}
			// Pulling again does nothing.
			f.reset()
			if err := p.Pull(context.Background(), "img", tg.g, f); err != nil {
				t.Fatal(err)
			}
			if f.total() != 0 {
				t.Errorf("a pull of a ready golden fetched %d blobs", f.total())
			}
			// A fresh Puller (an agent restart) sees it ready, from disk.
			p2 := newPuller(t, root)
			if sts := p2.Statuses(); len(sts) != 1 || sts[0].Name != "img" || sts[0].Phase != PhaseReady ||
				sts[0].Manifest != tg.g.Manifest.Digest {
				t.Errorf("statuses after restart %+v", sts)
			}
		})
	}
}

// expectDiscarded checks a pull that failed its integrity check: typed
// error, no bytes left, not ready, status Failed; and a positive control
// (the same golden from the honest store) pulls fine in the same root.
func expectDiscarded(t *testing.T, p *Puller, root string, tg *testGolden, err error) *DigestMismatchError {
	t.Helper()
	if !errors.Is(err, ErrIntegrity) {
		t.Fatalf("pull error %v, want an integrity error", err)
	}
	if exists(filepath.Join(root, "img")) {
		t.Error("partial download left behind")
	}
	if p.Ready("img", tg.g.Manifest.Digest) {
		t.Error("ready after an integrity failure")
	}
	if st := p.Progress("img"); st.Phase != PhaseFailed || !strings.Contains(st.Message, "discarded") {
		t.Errorf("status %+v", st)
	}
	if err := p.Pull(context.Background(), "control", tg.g, tg.store); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	checkPulled(t, root, "control", tg)
	var dm *DigestMismatchError
	errors.As(err, &dm)
	return dm
}

func TestPullWrongCompressedDigest(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, uniqueDisk(10), testChunk)
	c := tg.g.Chunks[2]
	// The same chunk compressed otherwise: it decompresses to the right
	// bytes, so only the compressed check can catch it.
	other := compress(t, c.Compression, tg.disk[c.Offset:c.Offset+c.Size], 3)
	if bytes.Equal(other, tg.chunks[2]) {
		t.Fatal("recompression gave the same bytes")
	}
	f := newFetcher(tg.store)
	f.hook = func(_ context.Context, d ocispec.Descriptor, _ int) (io.ReadCloser, error, bool) {
		if d.Digest == c.Layer.Digest {
			return bytesReader(other), nil, true
		}
		return nil, nil, false
	}
	// Same size, so that the digest (not the size) is what fails.
	g := *tg.g
	g.Chunks = append([]golden.Chunk(nil), tg.g.Chunks...)
	g.Chunks[2].Layer.Size = int64(len(other))
	p := newPuller(t, root)
	err := p.Pull(context.Background(), "img", &g, f)
	dm := expectDiscarded(t, p, root, tg, err)
	if dm == nil || dm.Chunk != 2 || dm.Stage != StageCompressed || dm.Got != digest.FromBytes(other) || dm.Want != c.Layer.Digest {
		t.Fatalf("error %#v", dm)
	}
	if n := f.count(c.Layer.Digest); n != 1 {
		t.Errorf("mismatched chunk fetched %d times: a digest mismatch is not retried", n)
	}
}

func TestPullWrongUncompressedDigest(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, uniqueDisk(11), testChunk)
	g := *tg.g
	g.Chunks = append([]golden.Chunk(nil), tg.g.Chunks...)
	g.Chunks[1].Digest = digest.FromString("not this chunk") // the annotation lies
	p := newPuller(t, root)
	err := p.Pull(context.Background(), "img", &g, tg.store)
	dm := expectDiscarded(t, p, root, tg, err)
	if dm == nil || dm.Chunk != 1 || dm.Stage != StageUncompressed || dm.Got != tg.g.Chunks[1].Digest {
		t.Fatalf("error %#v", dm)
	}
}

func TestPullTruncatedChunk(t *testing.T) {
	t.Run("compressed", func(t *testing.T) {
		root := t.TempDir()
		tg := buildGolden(t, uniqueDisk(12), testChunk)
		c := tg.g.Chunks[3]
		f := newFetcher(tg.store)
		f.hook = func(_ context.Context, d ocispec.Descriptor, _ int) (io.ReadCloser, error, bool) {
			if d.Digest == c.Layer.Digest { // cut short, then a clean EOF
				return bytesReader(tg.chunks[3][:len(tg.chunks[3])/2]), nil, true
			}
			return nil, nil, false
		}
		p := newPuller(t, root)
		dm := expectDiscarded(t, p, root, tg, p.Pull(context.Background(), "img", tg.g, f))
		if dm == nil || dm.Chunk != 3 || dm.Stage != StageCompressed || dm.GotSize != c.Layer.Size/2 {
			t.Fatalf("error %#v", dm)
		}
	})
	t.Run("uncompressed", func(t *testing.T) {
		// The annotation claims more bytes than the chunk holds.
		root := t.TempDir()
		tg := buildGolden(t, uniqueDisk(13), testChunk)
		g := *tg.g
		g.Chunks = append([]golden.Chunk(nil), tg.g.Chunks...)
		last := len(g.Chunks) - 1
		g.Chunks[last].Size += 100
		g.Config.DiskBytes += 100
		p := newPuller(t, root)
		dm := expectDiscarded(t, p, root, tg, p.Pull(context.Background(), "img", &g, tg.store))
		if dm == nil || dm.Chunk != last || dm.Stage != StageUncompressed || dm.GotSize != tg.g.Chunks[last].Size {
			t.Fatalf("error %#v", dm)
		}
	})
}

// recordingDisk records the extent of every write.
type recordingDisk struct {
	*os.File
	mu     sync.Mutex
	maxEnd int64
}

func (d *recordingDisk) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	d.maxEnd = max(d.maxEnd, off+int64(len(p)))
	d.mu.Unlock()
	return d.File.WriteAt(p, off)
}

func TestPullChunkLongerThanAnnotated(t *testing.T) {
	root := t.TempDir()
	disk := testDisk(14)
	copy(disk[len(disk)-5000:], bytes.Repeat([]byte{0xAB}, 5000)) // the tail is data
	tg := buildGolden(t, disk, testChunk)
	g := *tg.g
	g.Chunks = append([]golden.Chunk(nil), tg.g.Chunks...)
	last := len(g.Chunks) - 1
	g.Chunks[last].Size -= 3000 // the chunk holds 3000 bytes more than claimed
	g.Config.DiskBytes -= 3000
	var rec *recordingDisk
	p := newPuller(t, root)
	p.wrapDisk = func(f *os.File) diskFile { rec = &recordingDisk{File: f}; return rec }
	err := p.Pull(context.Background(), "img", &g, tg.store)
	if rec == nil {
		t.Fatal("disk never opened")
	}
	if rec.maxEnd > g.DiskSize() {
		t.Errorf("wrote up to %d, past the disk's end %d", rec.maxEnd, g.DiskSize())
	}
	p.wrapDisk = nil
	dm := expectDiscarded(t, p, root, tg, err)
	if dm == nil || dm.Chunk != last || dm.Stage != StageUncompressed || dm.GotSize <= dm.WantSize {
		t.Fatalf("error %#v", dm)
	}
}

func TestPullUndecodableChunk(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, uniqueDisk(15), testChunk)
	garbage := bytes.Repeat([]byte("not zstd "), 1000)
	g := *tg.g
	g.Chunks = append([]golden.Chunk(nil), tg.g.Chunks...)
	// The layer descriptor matches the garbage: only decompression fails.
	g.Chunks[4].Layer = ocispec.Descriptor{MediaType: golden.DiskMediaTypeZstd, Digest: digest.FromBytes(garbage), Size: int64(len(garbage))}
	g.Chunks[4].Compression = golden.Zstd
	f := newFetcher(tg.store)
	f.hook = func(_ context.Context, d ocispec.Descriptor, _ int) (io.ReadCloser, error, bool) {
		if d.Digest == g.Chunks[4].Layer.Digest {
			return bytesReader(garbage), nil, true
		}
		return nil, nil, false
	}
	p := newPuller(t, root)
	err := p.Pull(context.Background(), "img", &g, f)
	var ce *CorruptChunkError
	if !errors.As(err, &ce) || ce.Chunk != 4 {
		t.Fatalf("error %v, want a CorruptChunkError for chunk 4", err)
	}
	expectDiscarded(t, p, root, tg, err)
}

// cancelDuring makes chunk idx's fetch deliver half its bytes, then
// cancel the pull and fail with the context's error.
func cancelDuring(tg *testGolden, idx int, cancel context.CancelFunc) func(context.Context, ocispec.Descriptor, int) (io.ReadCloser, error, bool) {
	return func(ctx context.Context, d ocispec.Descriptor, _ int) (io.ReadCloser, error, bool) {
		if d.Digest != tg.g.Chunks[idx].Layer.Digest {
			return nil, nil, false
		}
		half := tg.chunks[idx][:len(tg.chunks[idx])/2]
		return &errAfterReader{data: half, err: context.Canceled, before: cancel}, nil, true
	}
}

// uniqueDisk has no two chunks alike, so that fetches count by chunk.
func uniqueDisk(seed uint64) []byte {
	d := testDisk(seed)
	for off := 0; off < len(d); off += testChunk {
		copy(d[off+100:], []byte{byte(off / testChunk), 0xEE, byte(seed)})
	}
	return d
}

func TestPullResumeAfterCancel(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, uniqueDisk(20), testChunk)
	ctx, cancel := context.WithCancel(context.Background())
	f := newFetcher(tg.store)
	f.hook = cancelDuring(tg, 4, cancel)
	p := newPuller(t, root)
	p.Concurrency = 1 // aux, hardware model, chunks 0-3, then 4 is cut
	err := p.Pull(ctx, "img", tg.g, f)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("pull error %v, want context.Canceled", err)
	}
	if p.Ready("img", tg.g.Manifest.Digest) {
		t.Fatal("ready after a cancelled pull")
	}
	st, err := readState(filepath.Join(root, "img"))
	if err != nil {
		t.Fatalf("no resume state: %v", err)
	}
	if len(st.Verified) != 4 || !st.Aux || !st.HardwareModel {
		t.Fatalf("state %+v, want chunks 0-3, aux and hardware model", st)
	}
	if s := p.Progress("img"); s.Phase != PhaseFailed || !strings.Contains(s.Message, "resume") {
		t.Errorf("status %+v", s)
	}

	// Resume: the kept chunks are re-hashed, not fetched.
	f = newFetcher(tg.store)
	var mu sync.Mutex
	rehashed := map[int]bool{}
	p.onRehash = func(i int) { mu.Lock(); rehashed[i] = true; mu.Unlock() }
	p.Concurrency = 4
	if err := p.Pull(context.Background(), "img", tg.g, f); err != nil {
		t.Fatal(err)
	}
	checkPulled(t, root, "img", tg)
	checkCounts(t, f, wantCounts(tg, []int{4, 5, 6, 7, 8}, false))
	for i := 0; i < 4; i++ {
		if !rehashed[i] {
			t.Errorf("kept chunk %d not re-verified", i)
		}
	}
	if len(rehashed) != 4 {
		t.Errorf("re-verified %v, want chunks 0-3", rehashed)
	}
	if a := allocated(t, filepath.Join(root, "img", DiskFile)); a >= int64(len(tg.disk)) {
		t.Errorf("resumed disk.img not sparse: %d of %d bytes", a, len(tg.disk))
	}
}

// corruptDisk overwrites region [off, off+n) of name's disk.img.
func corruptDisk(t *testing.T, root, name string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(root, name, DiskFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte{0x5A}, int(n)), off); err != nil {
		t.Fatal(err)
	}
}

func TestPullResumeRefetchesCorruptedChunk(t *testing.T) {
	for _, punch := range []bool{true, false} {
		t.Run(map[bool]string{true: "punch-hole", false: "write-all"}[punch], func(t *testing.T) {
			root := t.TempDir()
			tg := buildGolden(t, uniqueDisk(21), testChunk)
			// Pick a kept chunk with both zeros and data, so that the
			// corruption lands on its zero runs too.
			bad := -1
			for i := 0; i < 4; i++ {
				c := tg.g.Chunks[i]
				d := tg.disk[c.Offset : c.Offset+c.Size]
				if bytes.Count(d, []byte{0}) < len(d) && bytes.Contains(d, make([]byte, HoleSize)) {
					bad = i
					break
				}
			}
			if bad < 0 {
				t.Fatal("no chunk with zeros and data among 0-3")
			}
			ctx, cancel := context.WithCancel(context.Background())
			f := newFetcher(tg.store)
			f.hook = cancelDuring(tg, 4, cancel)
			p := newPuller(t, root)
			p.Concurrency = 1
			if err := p.Pull(ctx, "img", tg.g, f); !errors.Is(err, context.Canceled) {
				t.Fatalf("pull error %v", err)
			}
			c := tg.g.Chunks[bad]
			corruptDisk(t, root, "img", c.Offset, c.Size)

			if !punch {
				// A file that cannot punch holes (no Fd): chunks over
				// dirty regions are written in full.
				p.wrapDisk = func(f *os.File) diskFile { return noFdDisk{f} }
			}
			f = newFetcher(tg.store)
			p.Concurrency = 4
			if err := p.Pull(context.Background(), "img", tg.g, f); err != nil {
				t.Fatal(err)
			}
			checkPulled(t, root, "img", tg)
			checkCounts(t, f, wantCounts(tg, []int{bad, 4, 5, 6, 7, 8}, false))
			if a := allocated(t, filepath.Join(root, "img", DiskFile)); punch && a >= int64(len(tg.disk)) {
				t.Errorf("disk.img not sparse after re-fetching over holes punched: %d of %d bytes", a, len(tg.disk))
			}
		})
	}
}

// noFdDisk is a disk.img that hides its descriptor (no hole punching, no
// SEEK_DATA).
type noFdDisk struct{ f *os.File }

func (d noFdDisk) ReadAt(p []byte, off int64) (int, error)  { return d.f.ReadAt(p, off) }
func (d noFdDisk) WriteAt(p []byte, off int64) (int, error) { return d.f.WriteAt(p, off) }
func (d noFdDisk) Truncate(n int64) error                   { return d.f.Truncate(n) }
func (d noFdDisk) Sync() error                              { return d.f.Sync() }
func (d noFdDisk) Close() error                             { return d.f.Close() }

func TestPullResumeOtherManifestStartsOver(t *testing.T) {
	root := t.TempDir()
	old := buildGolden(t, uniqueDisk(22), testChunk)
	ctx, cancel := context.WithCancel(context.Background())
	f := newFetcher(old.store)
	f.hook = cancelDuring(old, 4, cancel)
	p := newPuller(t, root)
	p.Concurrency = 1
	if err := p.Pull(ctx, "img", old.g, f); !errors.Is(err, context.Canceled) {
		t.Fatalf("pull error %v", err)
	}
	// The same name now pulls another golden: nothing is kept.
	tg := buildGolden(t, uniqueDisk(23), testChunk)
	f = newFetcher(tg.store)
	if err := p.Pull(context.Background(), "img", tg.g, f); err != nil {
		t.Fatal(err)
	}
	checkPulled(t, root, "img", tg)
	checkCounts(t, f, wantCounts(tg, allChunks(tg), true))
	if p.Ready("img", old.g.Manifest.Digest) {
		t.Error("ready for the old manifest")
	}
}

func TestPullConcurrentSharesDownload(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, uniqueDisk(24), testChunk)
	started := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	f := newFetcher(tg.store)
	f.hook = func(ctx context.Context, d ocispec.Descriptor, _ int) (io.ReadCloser, error, bool) {
		once.Do(func() { close(started) })
		<-release
		return nil, nil, false
	}
	p := newPuller(t, root)
	errs := make(chan error, 2)
	go func() { errs <- p.Pull(context.Background(), "img", tg.g, f) }()
	<-started
	go func() { errs <- p.Pull(context.Background(), "img", tg.g, f) }()
	// Let the second Pull join the first's download.
	for deadline := time.Now().Add(5 * time.Second); ; {
		p.mu.Lock()
		refs := 0
		if d := p.active["img"]; d != nil {
			refs = d.refs
		}
		p.mu.Unlock()
		if refs == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("second Pull never joined")
		}
		time.Sleep(time.Millisecond)
	}
	// A Pull of another golden under the name is refused meanwhile.
	other := buildGolden(t, uniqueDisk(25), testChunk)
	if err := p.Pull(context.Background(), "img", other.g, other.store); !errors.Is(err, ErrBusy) {
		t.Errorf("pull of another golden under a busy name: %v, want ErrBusy", err)
	}
	close(release)
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	checkPulled(t, root, "img", tg)
	checkCounts(t, f, wantCounts(tg, allChunks(tg), true))
}

func TestPullConcurrentOneGivesUp(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, uniqueDisk(26), testChunk)
	started := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	f := newFetcher(tg.store)
	f.hook = func(ctx context.Context, d ocispec.Descriptor, _ int) (io.ReadCloser, error, bool) {
		once.Do(func() { close(started) })
		<-release
		return nil, nil, false
	}
	p := newPuller(t, root)
	ctx1, cancel1 := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { errs <- p.Pull(ctx1, "img", tg.g, f) }()
	<-started
	go func() { errs <- p.Pull(context.Background(), "img", tg.g, f) }()
	for {
		p.mu.Lock()
		refs := p.active["img"].refs
		p.mu.Unlock()
		if refs == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel1() // the first caller gives up; the download goes on for the second
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller got %v", err)
	}
	close(release)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	checkPulled(t, root, "img", tg)
	checkCounts(t, f, wantCounts(tg, allChunks(tg), true))
}

// stepper advances a fake clock whenever something waits on it, and
// records the status message it sees at each wait.
func stepper(t *testing.T, fc *clocktesting.FakeClock, p *Puller, name string) (stop func() []string) {
	done := make(chan struct{})
	var msgs []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if fc.HasWaiters() {
				msgs = append(msgs, p.Progress(name).Message)
				fc.Step(time.Minute)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	return func() []string { close(done); wg.Wait(); return msgs }
}

func TestPullTransientErrorsRetried(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, uniqueDisk(30), testChunk)
	c2, c3 := tg.g.Chunks[2], tg.g.Chunks[3]
	f := newFetcher(tg.store)
	f.hook = func(ctx context.Context, d ocispec.Descriptor, attempt int) (io.ReadCloser, error, bool) {
		if attempt > 1 {
			return nil, nil, false
		}
		switch d.Digest {
		case c2.Layer.Digest:
			return nil, &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}, true
		case c3.Layer.Digest: // half the body, then the connection drops
			return &errAfterReader{data: tg.chunks[3][:len(tg.chunks[3])/2], err: io.ErrUnexpectedEOF}, nil, true
		case tg.g.AuxiliaryStorage.Digest:
			return nil, &errcode.ErrorResponse{Method: http.MethodGet, StatusCode: http.StatusServiceUnavailable}, true
		}
		return nil, nil, false
	}
	fc := clocktesting.NewFakeClock(time.Now())
	p := newPuller(t, root)
	p.Clock = fc
	p.Backoff = Backoff{Initial: 10 * time.Second, Max: time.Minute}
	stop := stepper(t, fc, p, "img")
	err := p.Pull(context.Background(), "img", tg.g, f)
	msgs := stop()
	if err != nil {
		t.Fatal(err)
	}
	checkPulled(t, root, "img", tg)
	want := wantCounts(tg, allChunks(tg), true)
	want[c2.Layer.Digest]++
	want[c3.Layer.Digest]++
	want[tg.g.AuxiliaryStorage.Digest]++
	checkCounts(t, f, want)
	retrying := 0
	for _, m := range msgs {
		if strings.HasPrefix(m, "retrying: ") {
			retrying++
		}
	}
	if retrying == 0 {
		t.Errorf("no \"retrying: \" status while waiting; saw %q", msgs)
	}
	if st := p.Progress("img"); st.Phase != PhaseReady || st.Message != "" || st.BytesDone != st.BytesTotal {
		t.Errorf("status %+v", st)
	}
}

func TestPullRetriesExhaustedKeepsPartial(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, uniqueDisk(31), testChunk)
	c5 := tg.g.Chunks[5]
	f := newFetcher(tg.store)
	f.hook = func(ctx context.Context, d ocispec.Descriptor, _ int) (io.ReadCloser, error, bool) {
		if d.Digest == c5.Layer.Digest {
			return nil, &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}, true
		}
		return nil, nil, false
	}
	p := newPuller(t, root)
	p.Concurrency = 1
	p.Backoff = Backoff{Initial: time.Millisecond, Max: time.Millisecond, Retries: 2}
	err := p.Pull(context.Background(), "img", tg.g, f)
	if !errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ErrIntegrity) {
		t.Fatalf("pull error %v", err)
	}
	if n := f.count(c5.Layer.Digest); n != 3 {
		t.Errorf("failing chunk fetched %d times, want 1 + 2 retries", n)
	}
	if !exists(filepath.Join(root, "img", stateFile)) {
		t.Fatal("partial download not kept")
	}
	if st := p.Progress("img"); st.Phase != PhaseFailed {
		t.Errorf("status %+v", st)
	}
	// The registry is back: the pull resumes from chunk 5.
	f = newFetcher(tg.store)
	if err := p.Pull(context.Background(), "img", tg.g, f); err != nil {
		t.Fatal(err)
	}
	checkPulled(t, root, "img", tg)
	checkCounts(t, f, wantCounts(tg, []int{5, 6, 7, 8}, false))
}

func TestPullNotFoundNotRetried(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, uniqueDisk(32), testChunk)
	g := *tg.g
	g.Chunks = append([]golden.Chunk(nil), tg.g.Chunks...)
	g.Chunks[1].Layer.Digest = digest.FromString("missing")
	f := newFetcher(tg.store)
	p := newPuller(t, root)
	if err := p.Pull(context.Background(), "img", &g, f); err == nil || retryable(err) {
		t.Fatalf("pull error %v", err)
	}
	if n := f.count(g.Chunks[1].Layer.Digest); n != 1 {
		t.Errorf("missing blob fetched %d times", n)
	}
	if err := p.Pull(context.Background(), "img", tg.g, tg.store); err != nil {
		t.Fatalf("positive control: %v", err)
	}
}

// fullDisk fails writes with ENOSPC once limit bytes went through.
type fullDisk struct {
	*os.File
	mu      sync.Mutex
	written int64
	limit   int64
}

func (d *fullDisk) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	full := d.written+int64(len(p)) > d.limit
	if !full {
		d.written += int64(len(p))
	}
	d.mu.Unlock()
	if full {
		return 0, &os.PathError{Op: "write", Path: d.Name(), Err: syscall.ENOSPC}
	}
	return d.File.WriteAt(p, off)
}

func TestPullDiskFull(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, testDisk(40), testChunk)
	p := newPuller(t, root)
	p.wrapDisk = func(f *os.File) diskFile { return &fullDisk{File: f, limit: 300 << 10} }
	err := p.Pull(context.Background(), "img", tg.g, tg.store)
	if !errors.Is(err, ErrDiskFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("pull error %v, want ErrDiskFull and ENOSPC", err)
	}
	if exists(filepath.Join(root, "img")) {
		t.Error("partial download left behind")
	}
	if st := p.Progress("img"); st.Phase != PhaseFailed || !strings.Contains(st.Message, "disk full") {
		t.Errorf("status %+v", st)
	}
	p.wrapDisk = nil
	if err := p.Pull(context.Background(), "img", tg.g, tg.store); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	checkPulled(t, root, "img", tg)
}

type fixedSpace int64

func (s fixedSpace) Free(string) (int64, error) { return int64(s), nil }

func TestPullSpacePreCheck(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, testDisk(41), testChunk)
	f := newFetcher(tg.store)
	p := newPuller(t, root)
	p.Space = fixedSpace(EstimatedSize(tg.g) - 1)
	if err := p.Pull(context.Background(), "img", tg.g, f); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("pull error %v, want ErrDiskFull", err)
	}
	if f.total() != 0 || exists(filepath.Join(root, "img")) {
		t.Errorf("refused pull fetched %d blobs / left a directory", f.total())
	}
	p.Space = fixedSpace(EstimatedSize(tg.g))
	if err := p.Pull(context.Background(), "img", tg.g, f); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	if free, err := (StatfsSpace{}).Free(root); err != nil || free <= 0 {
		t.Errorf("statfs free %d, %v", free, err)
	}
}

func TestPullRefusesBadInput(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, testDisk(42), testChunk)
	p := newPuller(t, root)
	for _, name := range []string{"", "..", "a/b", ".hidden", strings.Repeat("x", 200)} {
		if err := p.Pull(context.Background(), name, tg.g, tg.store); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	for what, mod := range map[string]func(g *golden.Golden){
		"gap":      func(g *golden.Golden) { g.Chunks[2].Offset++ },
		"overflow": func(g *golden.Golden) { g.Config.DiskBytes-- },
		"index":    func(g *golden.Golden) { g.Chunks[1].Index = 5 },
		"comp":     func(g *golden.Golden) { g.Chunks[1].Compression = "gzip" },
		"aux":      func(g *golden.Golden) { g.AuxiliaryStorage.Size = golden.MaxAuxSize + 1 },
	} {
		g := *tg.g
		g.Chunks = append([]golden.Chunk(nil), tg.g.Chunks...)
		mod(&g)
		if err := p.Pull(context.Background(), "img", &g, tg.store); !errors.Is(err, golden.ErrInvalid) {
			t.Errorf("%s: %v, want golden.ErrInvalid", what, err)
		}
	}
	if err := p.Pull(context.Background(), "img", tg.g, tg.store); err != nil {
		t.Fatalf("positive control: %v", err)
	}
}

func TestPullRate(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, uniqueDisk(50), testChunk)
	fc := clocktesting.NewFakeClock(time.Now())
	p := newPuller(t, root)
	p.Clock = fc
	p.Concurrency = 1
	p.RateWindow = 10 * time.Second
	var rates []float64
	var seen atomic.Int64
	f := newFetcher(tg.store)
	f.hook = func(ctx context.Context, d ocispec.Descriptor, _ int) (io.ReadCloser, error, bool) {
		// Each blob takes one second on the fake clock.
		fc.Step(time.Second)
		if seen.Add(1) > 3 {
			st := p.Progress("img")
			if st.Phase != PhasePulling || st.BytesDone <= 0 || st.BytesDone >= st.BytesTotal {
				t.Errorf("status while pulling %+v", st)
			}
			rates = append(rates, st.Rate)
		}
		return nil, nil, false
	}
	if err := p.Pull(context.Background(), "img", tg.g, f); err != nil {
		t.Fatal(err)
	}
	for _, r := range rates {
		if r <= 0 {
			t.Fatalf("rates %v: want all > 0 while pulling", rates)
		}
	}
	// Rate is only for pulls in progress.
	if st := p.Progress("img"); st.Rate != 0 {
		t.Errorf("rate of a ready image %v", st.Rate)
	}
}

func TestRateMeter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := rateMeter{window: 10 * time.Second}
	if r := m.rate(t0); r != 0 {
		t.Fatalf("empty meter rate %v", r)
	}
	for i := 0; i < 20; i++ { // 1 MB a second for 20 s
		m.add(t0.Add(time.Duration(i)*time.Second), 1e6)
	}
	if r := m.rate(t0.Add(20 * time.Second)); r < 0.85e6 || r > 1.15e6 {
		t.Errorf("steady rate %v, want about 1e6", r)
	}
	if r := m.rate(t0.Add(40 * time.Second)); r != 0 {
		t.Errorf("rate after a quiet window %v", r)
	}
	m2 := rateMeter{window: 10 * time.Second}
	m2.add(t0, 0)
	m2.add(t0.Add(2*time.Second), 4e6) // a young transfer: over its 2 s, not the window
	if r := m2.rate(t0.Add(2 * time.Second)); r != 2e6 {
		t.Errorf("young rate %v, want 2e6", r)
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 5 * time.Second}.withDefaults()
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		if got := b.delay(i); got != want {
			t.Errorf("delay(%d) = %v, want %v", i, got, want)
		}
	}
}

func TestIsTransient(t *testing.T) {
	for err, want := range map[error]bool{
		io.ErrUnexpectedEOF: true,
		&os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}: true,
		syscall.ECONNRESET:                      true,
		&errcode.ErrorResponse{StatusCode: 502}: true,
		&errcode.ErrorResponse{StatusCode: 429}: true,
		&errcode.ErrorResponse{StatusCode: 404}: false,
		&errcode.ErrorResponse{StatusCode: 401}: false,
		context.Canceled:                        false,
		errors.New("whatever"):                  false,
		&DigestMismatchError{}:                  false,
	} {
		if got := isTransient(err); got != want {
			t.Errorf("isTransient(%v) = %v, want %v", err, got, want)
		}
	}
	// Our own checks are never retried, whatever they wrap.
	if retryable(&DigestMismatchError{}) || retryable(io.ErrUnexpectedEOF) || !retryable(&fetchError{io.ErrUnexpectedEOF}) {
		t.Error("retryable misclassifies")
	}
}

func TestVerify(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, uniqueDisk(60), testChunk)
	p := newPuller(t, root)
	if err := p.Pull(context.Background(), "img", tg.g, tg.store); err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(context.Background(), "img", tg.g); err != nil {
		t.Fatalf("verify of a good golden: %v", err)
	}
	c := tg.g.Chunks[6]
	corruptDisk(t, root, "img", c.Offset+10, 10)
	var dm *DigestMismatchError
	if err := p.Verify(context.Background(), "img", tg.g); !errors.As(err, &dm) || dm.Chunk != 6 || dm.Stage != StageWritten {
		t.Fatalf("verify of a corrupt golden: %v", err)
	}
	if p.Ready("img", tg.g.Manifest.Digest) {
		t.Fatal("still ready after a failed verify")
	}
	f := newFetcher(tg.store)
	if err := p.Pull(context.Background(), "img", tg.g, f); err != nil {
		t.Fatal(err)
	}
	checkPulled(t, root, "img", tg)
	checkCounts(t, f, wantCounts(tg, []int{6}, false))
}

func TestWriteSparse(t *testing.T) {
	// zeros, data, zeros, then a 1000-byte tail: zero and non-zero.
	for _, tail := range []byte{0, 9} {
		p := make([]byte, 3*HoleSize+1000)
		p[HoleSize+5] = 1
		for i := 3 * HoleSize; i < len(p); i++ {
			p[i] = tail
		}
		w := &writeLog{}
		n, err := writeSparse(w, p, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		want := []write{{1<<20 + HoleSize, HoleSize}}
		if tail != 0 {
			want = append(want, write{1<<20 + 3*HoleSize, 1000})
		}
		if len(w.w) != len(want) || n != sum(want) {
			t.Fatalf("tail %d: writes %v, want %v", tail, w.w, want)
		}
		for i := range want {
			if w.w[i] != want[i] {
				t.Fatalf("tail %d: writes %v, want %v", tail, w.w, want)
			}
		}
	}
	// Adjacent data blocks go in one write.
	w := &writeLog{}
	writeSparse(w, bytes.Repeat([]byte{1}, 4*HoleSize), 0)
	if len(w.w) != 1 || w.w[0] != (write{0, 4 * HoleSize}) {
		t.Errorf("writes %v, want one", w.w)
	}
}

type write struct{ off, n int64 }

type writeLog struct{ w []write }

func (l *writeLog) WriteAt(p []byte, off int64) (int, error) {
	l.w = append(l.w, write{off, int64(len(p))})
	return len(p), nil
}

func sum(w []write) int64 {
	var n int64
	for _, x := range w {
		n += x.n
	}
	return n
}

func TestPullCancelledBeforeStart(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, smallDisk(70), testChunk)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := newFetcher(tg.store)
	p := newPuller(t, root)
	if err := p.Pull(ctx, "img", tg.g, f); !errors.Is(err, context.Canceled) || f.total() != 0 {
		t.Fatalf("pull error %v, %d fetches", err, f.total())
	}
	if err := p.Pull(context.Background(), "img", tg.g, f); err != nil {
		t.Fatalf("positive control: %v", err)
	}
}
