package images

// Fault tests of the golden cache against the real CNCF Distribution
// registry on loopback (test/registry; `make registry` builds it, and
// without it these tests fail, saying so). Each fault has its positive
// control beside it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/retry"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/golden"
	"github.com/boualleiguie/macrack-operator/internal/golden/simgolden"
	"github.com/boualleiguie/macrack-operator/test/registry"
)

// wire counts the GETs that reach the registry, by the digest they name
// (the last element of the path): what the registry really served,
// whatever the layers above retried.
type wire struct {
	base http.RoundTripper

	mu           sync.Mutex
	blobGets     map[string]int
	manifestGets map[string]int
}

func (w *wire) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet {
		d := path.Base(req.URL.Path)
		w.mu.Lock()
		switch {
		case strings.Contains(req.URL.Path, "/blobs/"):
			w.blobGets[d]++
		case strings.Contains(req.URL.Path, "/manifests/"):
			w.manifestGets[d]++
		}
		w.mu.Unlock()
	}
	return w.base.RoundTrip(req)
}

func (w *wire) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.blobGets, w.manifestGets = map[string]int{}, map[string]int{}
}

func (w *wire) blobs() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return copyCounts(w.blobGets)
}

func (w *wire) manifests() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return copyCounts(w.manifestGets)
}

func copyCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// regEnv is a real registry and the transport every repository of the
// test uses: oras' retrying transport over the wire counter, as
// golden.Repository has by default over the network.
type regEnv struct {
	reg  *registry.Server
	wire *wire
	opts golden.RemoteOptions
}

func startRegistry(t testing.TB) *regEnv {
	t.Helper()
	reg := registry.StartT(t)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	w := &wire{base: tr, blobGets: map[string]int{}, manifestGets: map[string]int{}}
	return &regEnv{reg: reg, wire: w,
		opts: golden.RemoteOptions{PlainHTTP: true, Client: &http.Client{Transport: retry.NewTransport(w)}}}
}

func (e *regEnv) repo(t testing.TB, ref string) *remote.Repository {
	t.Helper()
	r, err := golden.Repository(ref, e.opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// pushedGolden is a golden pushed to the registry: its reference pinned by
// digest, its manifest as Resolve reads it, and the files it was made of.
type pushedGolden struct {
	ref           string
	g             *golden.Golden
	config        digest.Digest
	disk, aux, hw []byte
}

// writeRandomSource writes a golden source whose disk is chunks chunks of
// random bytes (none alike, incompressible), with aux storage and a
// hardware model of the seed's own.
func writeRandomSource(t testing.TB, dir string, chunks int, chunkBytes int64, seed uint64) golden.Source {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	disk := make([]byte, int64(chunks)*chunkBytes)
	fillRandom(rng, disk)
	aux := make([]byte, 64<<10+int(seed))
	fillRandom(rng, aux)
	src := golden.Source{
		Disk: filepath.Join(dir, "disk.img"), AuxiliaryStorage: filepath.Join(dir, "aux.img"),
		HardwareModel: filepath.Join(dir, "hardware-model"),
		MacOSVersion:  "15.5", XcodeVersions: []string{"16.4"},
	}
	for p, b := range map[string][]byte{src.Disk: disk, src.AuxiliaryStorage: aux,
		src.HardwareModel: fmt.Appendf(nil, "bplist00 hardware model %d", seed)} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

func fillRandom(rng *rand.Rand, b []byte) {
	for i := 0; i < len(b); i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

// push pushes src as a golden into repository repoName and resolves it as
// the agent would; the wire counts start from zero after it.
func (e *regEnv) push(t testing.TB, repoName string, src golden.Source, opts golden.PushOptions) *pushedGolden {
	t.Helper()
	ctx := context.Background()
	name := e.reg.Host() + "/" + repoName
	repo := e.repo(t, name)
	desc, err := golden.Push(ctx, repo, "", src, opts)
	if err != nil {
		t.Fatalf("Push %s: %v", repoName, err)
	}
	pg := &pushedGolden{ref: name + "@" + desc.Digest.String()}
	if pg.g, err = golden.Resolve(ctx, e.repo(t, pg.ref), pg.ref); err != nil {
		t.Fatalf("Resolve %s: %v", pg.ref, err)
	}
	rc, err := repo.Manifests().Fetch(ctx, pg.g.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	err = json.NewDecoder(rc).Decode(&m)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	pg.config = m.Config.Digest
	for p, dst := range map[string]*[]byte{src.Disk: &pg.disk, src.AuxiliaryStorage: &pg.aux, src.HardwareModel: &pg.hw} {
		if *dst, err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	e.wire.reset()
	return pg
}

func (e *regEnv) pushRandom(t testing.TB, repoName string, chunks int, chunkBytes int64, seed uint64, comp golden.Compression) *pushedGolden {
	t.Helper()
	src := writeRandomSource(t, t.TempDir(), chunks, chunkBytes, seed)
	return e.push(t, repoName, src, golden.PushOptions{ChunkSize: chunkBytes, Compression: comp, Concurrency: 2})
}

// pushSim pushes a simgolden (a sparse disk, a marker per chunk).
func (e *regEnv) pushSim(t testing.TB, repoName, name string, diskBytes, chunkBytes int64) *pushedGolden {
	t.Helper()
	src, err := simgolden.Write(t.TempDir(), name, diskBytes, chunkBytes, 0)
	if err != nil {
		t.Fatal(err)
	}
	return e.push(t, repoName, src, golden.PushOptions{ChunkSize: chunkBytes})
}

// checkOnDisk asserts that <root>/<name>/ holds pg exactly.
func checkOnDisk(t *testing.T, root, name string, pg *pushedGolden) {
	t.Helper()
	for file, want := range map[string][]byte{DiskFile: pg.disk, AuxFile: pg.aux, HardwareModelFile: pg.hw} {
		got, err := os.ReadFile(filepath.Join(root, name, file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s/%s differs from what was pushed (%d bytes, want %d)", name, file, len(got), len(want))
		}
	}
}

// fetchCounter counts the fetches a puller asks of its source, by digest,
// and lets a test act on any of them.
type fetchCounter struct {
	mu     sync.Mutex
	counts map[digest.Digest]int
	// hook runs before each fetch (attempt counts from 1 per digest); an
	// error it returns is the fetch's.
	hook func(ctx context.Context, desc ocispec.Descriptor, attempt int) error
}

func newFetchCounter() *fetchCounter { return &fetchCounter{counts: map[digest.Digest]int{}} }

func (c *fetchCounter) setHook(h func(ctx context.Context, desc ocispec.Descriptor, attempt int) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hook = h
}

func (c *fetchCounter) fetch(ctx context.Context, desc ocispec.Descriptor, src content.Fetcher) (io.ReadCloser, error) {
	c.mu.Lock()
	c.counts[desc.Digest]++
	n, hook := c.counts[desc.Digest], c.hook
	c.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, desc, n); err != nil {
			return nil, err
		}
	}
	return src.Fetch(ctx, desc)
}

func (c *fetchCounter) count(d digest.Digest) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[d]
}

// countingTarget is a repository whose fetches go through a fetchCounter.
type countingTarget struct {
	oras.ReadOnlyTarget
	c *fetchCounter
}

func (t countingTarget) Fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	return t.c.fetch(ctx, desc, t.ReadOnlyTarget)
}

// checkChunkFetches asserts how often each chunk (by index) and the aux
// storage and hardware model were fetched; want has every chunk index.
func checkChunkFetches(t *testing.T, c *fetchCounter, g *golden.Golden, want map[int]int, auxHW int) {
	t.Helper()
	for _, ch := range g.Chunks {
		if got := c.count(ch.Layer.Digest); got != want[ch.Index] {
			t.Errorf("chunk %d fetched %d times, want %d", ch.Index, got, want[ch.Index])
		}
	}
	for what, d := range map[string]digest.Digest{"aux storage": g.AuxiliaryStorage.Digest, "hardware model": g.HardwareModel.Digest} {
		if got := c.count(d); got != auxHW {
			t.Errorf("%s fetched %d times, want %d", what, got, auxHW)
		}
	}
}

func chunkSet(g *golden.Golden, n int, except ...int) map[int]int {
	m := map[int]int{}
	for _, c := range g.Chunks {
		if !slices.Contains(except, c.Index) {
			m[c.Index] = n
		}
	}
	return m
}

func macOSImage(name, ref string) *fleetv1alpha1.MacOSImage {
	return &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fleetv1alpha1.MacOSImageSpec{Source: ref, PlainHTTP: true}}
}

// storeEnv is a Store wired as the agent wires it (one Cache shared by
// the Puller and the Store), over the test's registry, running on its own
// context. Its clock only paces the store's retries of failed pulls: a
// test steps it to let a failed pull run again.
type storeEnv struct {
	s       *Store
	clock   *clocktesting.FakeClock
	fetches *fetchCounter
	cancel  context.CancelFunc
	done    chan struct{}
	evicted []string
	reasons []string
	evMu    sync.Mutex
}

func (e *regEnv) newStore(t *testing.T, root string, tune func(*Store)) *storeEnv {
	t.Helper()
	log := testr.New(t)
	cache := &Cache{Root: root, Log: log}
	se := &storeEnv{clock: clocktesting.NewFakeClock(time.Now()), fetches: newFetchCounter(), done: make(chan struct{})}
	se.s = &Store{
		Puller: &Puller{Root: root, Concurrency: 2, Log: log, Cache: cache, Space: StatfsSpace{},
			Backoff: Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}},
		Cache: cache, Cloner: DefaultCloner(log), Clock: se.clock, Log: log, Retry: time.Hour,
		Source: func(img *fleetv1alpha1.MacOSImage) (oras.ReadOnlyTarget, error) {
			repo, err := golden.Repository(img.Spec.Source, e.opts)
			if err != nil {
				return nil, err
			}
			return countingTarget{ReadOnlyTarget: repo, c: se.fetches}, nil
		},
		OnEvict: func(name, reason string) {
			se.evMu.Lock()
			defer se.evMu.Unlock()
			se.evicted = append(se.evicted, name)
			se.reasons = append(se.reasons, reason)
		},
	}
	if tune != nil {
		tune(se.s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	se.cancel = cancel
	go func() { se.s.Run(ctx); close(se.done) }()
	for deadline := time.Now().Add(5 * time.Second); ; {
		se.s.mu.Lock()
		running := se.s.ctx != nil
		se.s.mu.Unlock()
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the store never ran")
		}
		time.Sleep(time.Millisecond)
	}
	t.Cleanup(func() { se.stop(t) })
	return se
}

// stop is the agent going away: the store's context ends, and stop
// returns once no pull of it runs any more.
func (se *storeEnv) stop(t *testing.T) {
	t.Helper()
	se.cancel()
	<-se.done
	for deadline := time.Now().Add(10 * time.Second); ; {
		se.s.mu.Lock()
		busy := false
		for _, p := range se.s.pulls {
			busy = busy || p.running
		}
		se.s.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a pull still runs 10s after the store's context ended")
		}
		time.Sleep(time.Millisecond)
	}
}

func (se *storeEnv) evictions() ([]string, []string) {
	se.evMu.Lock()
	defer se.evMu.Unlock()
	return slices.Clone(se.evicted), slices.Clone(se.reasons)
}

// await calls Ensure (on demand) until ok says yes, as a reconciler would
// on each requeue.
func (se *storeEnv) await(t *testing.T, img *fleetv1alpha1.MacOSImage, what string, ok func(State) bool) State {
	t.Helper()
	var st State
	for deadline := time.Now().Add(20 * time.Second); ; {
		st = se.s.Ensure(img, false)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s of %s: the last state is %+v", what, img.Name, st)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// readyOrStuck stops waiting for Ready on Failed or Waiting too, so that
// a test says why instead of timing out.
func readyOrStuck(st State) bool {
	return st.Phase == fleetv1alpha1.ImageReady || st.Phase == fleetv1alpha1.ImageFailed || st.Phase == fleetv1alpha1.ImageWaiting
}

// ensureReady waits for Ready, failing at once on Failed or Waiting from
// a pull that has stopped (a retried pull reports Waiting until it has
// made room).
func (se *storeEnv) ensureReady(t *testing.T, img *fleetv1alpha1.MacOSImage) {
	t.Helper()
	stuck := 0
	st := se.await(t, img, "Ready", func(st State) bool {
		if st.Phase == fleetv1alpha1.ImageReady {
			return true
		}
		if st.Phase == fleetv1alpha1.ImageFailed || st.Phase == fleetv1alpha1.ImageWaiting {
			if se.running(img.Name) {
				stuck = 0
			} else if stuck++; stuck > 1 { // twice in a row with no pull running
				return true
			}
		}
		return false
	})
	if st.Phase != fleetv1alpha1.ImageReady {
		t.Fatalf("%s: %+v, want Ready", img.Name, st)
	}
	// The golden is Ready before its pull's goroutine has released its
	// reservation and busy count; a test that next needs room waits for
	// that, or finds the golden still held.
	for deadline := time.Now().Add(20 * time.Second); se.running(img.Name); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: Ready, but its pull still runs", img.Name)
		}
	}
}

func (se *storeEnv) running(name string) bool {
	se.s.mu.Lock()
	defer se.s.mu.Unlock()
	p := se.s.pulls[name]
	return p != nil && p.running
}

func reported(t *testing.T, s *Store, name string) fleetv1alpha1.ReportedImage {
	t.Helper()
	imgs, _ := s.Report()
	for _, r := range imgs {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("Report does not list %s: %+v", name, imgs)
	return fleetv1alpha1.ReportedImage{}
}

// rootEntries lists the cache root, so that a test can say nothing is left.
func rootEntries(t *testing.T, root string) []string {
	t.Helper()
	ents, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// (a) The registry goes down mid-pull and comes back.

func TestRegistryDownMidPullRetriesAndResumes(t *testing.T) {
	env := startRegistry(t)
	pg := env.pushRandom(t, "goldens/down", 16, 256<<10, 1, golden.Zstd)
	root := t.TempDir()
	const initial = 10 * time.Millisecond
	se := env.newStore(t, root, func(s *Store) {
		// One blob at a time: aux, hardware model, then chunks in order,
		// so that which chunks verified before the stop is known.
		s.Puller.Concurrency = 1
		s.Puller.Backoff = Backoff{Initial: initial, Max: 40 * time.Millisecond, Retries: 1000}
	})
	const stopAt = 6
	cut := pg.g.Chunks[stopAt].Layer.Digest
	var mu sync.Mutex
	var attempts []time.Time
	var keptAtStop []int
	stopped := make(chan struct{})
	se.fetches.setHook(func(_ context.Context, d ocispec.Descriptor, attempt int) error {
		if d.Digest != cut {
			return nil
		}
		mu.Lock()
		attempts = append(attempts, time.Now())
		mu.Unlock()
		if attempt == 1 {
			st, err := readState(filepath.Join(root, "img"))
			if err != nil {
				t.Errorf("no pull state at the stop: %v", err)
			} else {
				keptAtStop = st.Verified
			}
			env.reg.Stop()
			close(stopped)
		}
		return nil
	})
	img := macOSImage("img", pg.ref)
	st := se.await(t, img, "a retrying message", func(st State) bool { return strings.HasPrefix(st.Message, "retrying: ") })
	<-stopped
	if st.Phase != fleetv1alpha1.ImagePulling || !strings.Contains(st.Message, "connection refused") ||
		!strings.Contains(st.Message, fmt.Sprintf("chunk %d", stopAt)) {
		t.Errorf("state while the registry is down: %+v", st)
	}
	if want := []int{0, 1, 2, 3, 4, 5}; !reflect.DeepEqual(keptAtStop, want) {
		t.Fatalf("chunks verified when the registry stopped: %v, want %v", keptAtStop, want)
	}
	if r := reported(t, se.s, "img"); r.Phase != fleetv1alpha1.ImagePulling || !strings.HasPrefix(r.Message, "retrying: ") ||
		r.BytesDone <= 0 || r.BytesDone >= r.BytesTotal {
		t.Errorf("reported while the registry is down: %+v", r)
	}
	// It keeps retrying, each time after a backoff wait, not in a loop.
	waitFor(t, "three attempts at the cut chunk", func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) >= 3 })
	if se.s.Puller.Ready("img", pg.g.Manifest.Digest) {
		t.Fatal("ready while the registry is down")
	}
	if err := env.reg.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	se.ensureReady(t, img)
	checkOnDisk(t, root, "img", pg)

	mu.Lock()
	n := len(attempts)
	for i := 1; i < n; i++ {
		if gap := attempts[i].Sub(attempts[i-1]); gap < initial {
			t.Errorf("attempt %d came %s after the one before, under the backoff's %s", i+1, gap, initial)
		}
	}
	mu.Unlock()
	// Resumed where it stopped: the chunks verified before the stop were
	// fetched once, the cut one once per attempt, the rest once.
	want := chunkSet(pg.g, 1)
	want[stopAt] = n
	checkChunkFetches(t, se.fetches, pg.g, want, 1)
	if n < 3 {
		t.Errorf("the cut chunk was tried %d times", n)
	}
	// On the wire: each chunk but the cut one was asked for once (the cut
	// one once per attempt, refused ones included).
	for _, c := range pg.g.Chunks {
		if got := env.wire.blobs()[c.Layer.Digest.String()]; got < 1 || (c.Index != stopAt && got != 1) {
			t.Errorf("the registry was asked for chunk %d %d times", c.Index, got)
		}
	}
	// The status settles just after the verified files land (Ready reads
	// the files).
	waitFor(t, "the status to say Ready", func() bool { return se.s.Puller.Progress("img").Phase == PhaseReady })
	if p := se.s.Puller.Progress("img"); p.Phase != PhaseReady || p.Message != "" || p.BytesDone != p.BytesTotal {
		t.Errorf("status once ready: %+v", p)
	}
}

// The registry stays down longer than the retries: the pull fails keeping
// its partial bytes, and a later pull (a new Puller: an agent restart)
// fetches only what is missing.
func TestRegistryDownPastTheRetriesKeepsThePartialPull(t *testing.T) {
	env := startRegistry(t)
	pg := env.pushRandom(t, "goldens/down-long", 16, 256<<10, 2, golden.LZ4)
	root := t.TempDir()
	const stopAt = 9
	f := newFetchCounter()
	f.setHook(func(_ context.Context, d ocispec.Descriptor, attempt int) error {
		if d.Digest == pg.g.Chunks[stopAt].Layer.Digest && attempt == 1 {
			env.reg.Stop()
		}
		return nil
	})
	p := &Puller{Root: root, Concurrency: 1, Log: testr.New(t),
		Backoff: Backoff{Initial: 2 * time.Millisecond, Max: 5 * time.Millisecond, Retries: 3}}
	src := countingTarget{ReadOnlyTarget: env.repo(t, pg.ref), c: f}
	err := p.Pull(context.Background(), "img", pg.g, src)
	if !errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ErrIntegrity) {
		t.Fatalf("pull error %v, want connection refused", err)
	}
	if n := f.count(pg.g.Chunks[stopAt].Layer.Digest); n != 4 {
		t.Errorf("the cut chunk was tried %d times, want 1 + 3 retries", n)
	}
	if st := p.Progress("img"); st.Phase != PhaseFailed || !strings.Contains(st.Message, "kept for resume") {
		t.Errorf("status %+v", st)
	}
	st, err := readState(filepath.Join(root, "img"))
	if err != nil || len(st.Verified) != stopAt {
		t.Fatalf("kept state %+v (%v), want chunks 0-%d", st, err, stopAt-1)
	}
	if p.Ready("img", pg.g.Manifest.Digest) || exists(filepath.Join(root, "img", readyFile)) {
		t.Fatal("ready after a failed pull")
	}

	if err := env.reg.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	f2 := newFetchCounter()
	p2 := &Puller{Root: root, Concurrency: 4, Log: testr.New(t)}
	var rehashed sync.Map
	p2.onRehash = func(i int) { rehashed.Store(i, true) }
	if err := p2.Pull(context.Background(), "img", pg.g, countingTarget{ReadOnlyTarget: env.repo(t, pg.ref), c: f2}); err != nil {
		t.Fatal(err)
	}
	checkOnDisk(t, root, "img", pg)
	want := chunkSet(pg.g, 0)
	for i := stopAt; i < len(pg.g.Chunks); i++ {
		want[i] = 1
	}
	checkChunkFetches(t, f2, pg.g, want, 0)
	for i := 0; i < stopAt; i++ {
		if _, ok := rehashed.Load(i); !ok {
			t.Errorf("kept chunk %d not re-verified", i)
		}
	}
}

// (b) A chunk blob corrupted where the registry stores it.

func TestCorruptChunkBlobInTheRegistry(t *testing.T) {
	env := startRegistry(t)
	bad := env.pushRandom(t, "goldens/corrupt", 8, 256<<10, 3, golden.Zstd)
	good := env.pushRandom(t, "goldens/control", 8, 256<<10, 4, golden.Zstd)
	root := t.TempDir()
	se := env.newStore(t, root, nil)

	// Positive control: an undamaged golden pulls Ready through the store.
	se.ensureReady(t, macOSImage("control", good.ref))
	checkOnDisk(t, root, "control", good)

	const k = 5
	c := bad.g.Chunks[k]
	blob := env.reg.BlobPath(c.Layer.Digest.String())
	orig, err := os.ReadFile(blob)
	if err != nil || int64(len(orig)) != c.Layer.Size {
		t.Fatalf("the blob's data file: %d bytes (%v), the layer %d", len(orig), err, c.Layer.Size)
	}
	damaged := bytes.Clone(orig)
	for i := len(damaged) / 2; i < len(damaged)/2+3; i++ {
		damaged[i] ^= 0xFF
	}
	if err := os.WriteFile(blob, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	gotDigest := digest.FromBytes(damaged)

	img := macOSImage("img", bad.ref)
	st := se.await(t, img, "Failed", readyOrStuck)
	if st.Phase != fleetv1alpha1.ImageFailed {
		t.Fatalf("state %+v, want Failed", st)
	}
	for _, want := range []string{fmt.Sprintf("chunk %d", k), "compressed digest mismatch", c.Layer.Digest.String(), gotDigest.String()} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("the message %q does not say %q", st.Message, want)
		}
	}
	if p := se.s.Puller.Progress("img"); p.Phase != PhaseFailed || !strings.Contains(p.Message, "discarded") {
		t.Errorf("puller status %+v", p)
	}
	if r := reported(t, se.s, "img"); r.Phase != fleetv1alpha1.ImageFailed || !strings.Contains(r.Message, gotDigest.String()) {
		t.Errorf("reported %+v", r)
	}
	if got := rootEntries(t, root); !reflect.DeepEqual(got, []string{"control"}) {
		t.Errorf("the cache root holds %v, want only the control: the damaged pull's bytes stayed", got)
	}
	if se.s.Puller.Ready("img", bad.g.Manifest.Digest) {
		t.Error("ready after an integrity failure")
	}
	if n := se.fetches.count(c.Layer.Digest); n != 1 {
		t.Errorf("the damaged chunk was fetched %d times: a digest mismatch is not retried", n)
	}
	dst := filepath.Join(t.TempDir(), "disk.img")
	if _, err := se.s.Clone(img, dst, ""); !errors.Is(err, ErrNotReady) || exists(dst) {
		t.Errorf("clone of the failed golden: %v (dst made: %v)", err, exists(dst))
	}

	// The puller's own error is typed, with both digests.
	err = se.s.Puller.Pull(context.Background(), "img", bad.g, env.repo(t, bad.ref))
	var dm *DigestMismatchError
	if !errors.Is(err, ErrIntegrity) || !errors.As(err, &dm) || dm.Chunk != k || dm.Blob != BlobChunk ||
		dm.Stage != StageCompressed || dm.Want != c.Layer.Digest || dm.Got != gotDigest {
		t.Fatalf("pull error %v (%#v)", err, dm)
	}
	if exists(filepath.Join(root, "img")) {
		t.Error("the second failed pull left bytes")
	}

	// Undo the damage: the same image now pulls Ready.
	if err := os.WriteFile(blob, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	se.clock.Step(2 * time.Hour)
	se.ensureReady(t, img)
	checkOnDisk(t, root, "img", bad)
}

// (c) A chunk blob truncated where the registry stores it.

func TestTruncatedChunkBlobInTheRegistry(t *testing.T) {
	env := startRegistry(t)
	pg := env.pushRandom(t, "goldens/truncated", 8, 256<<10, 5, golden.Zstd)
	root := t.TempDir()
	se := env.newStore(t, root, func(s *Store) { s.Puller.Concurrency = 1 })
	const k = 4
	c := pg.g.Chunks[k]
	blob := env.reg.BlobPath(c.Layer.Digest.String())
	orig, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(blob, c.Layer.Size/2); err != nil {
		t.Fatal(err)
	}
	img := macOSImage("img", pg.ref)
	st := se.await(t, img, "Failed", readyOrStuck)
	if st.Phase != fleetv1alpha1.ImageFailed || !strings.Contains(st.Message, fmt.Sprintf("chunk %d", k)) {
		t.Fatalf("state %+v, want Failed naming chunk %d", st, k)
	}
	t.Logf("a truncated blob fails the pull with: %s", st.Message)
	// Clean: never ready, no ready marker, the short chunk not kept as
	// verified, nothing to clone; and not retried in a loop.
	dir := filepath.Join(root, "img")
	if se.s.Puller.Ready("img", pg.g.Manifest.Digest) || exists(filepath.Join(dir, readyFile)) {
		t.Fatal("a golden with a truncated chunk is marked ready")
	}
	var kept []int
	if s, err := readState(dir); err == nil {
		kept = s.Verified
	} else if !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if slices.Contains(kept, k) {
		t.Fatalf("the truncated chunk %d is kept as verified: %v", k, kept)
	}
	if n := se.fetches.count(c.Layer.Digest); n > 2 {
		t.Errorf("the truncated chunk was fetched %d times", n)
	}
	if p := se.s.Puller.Progress("img"); p.Phase != PhaseFailed {
		t.Errorf("puller status %+v", p)
	}
	dst := filepath.Join(t.TempDir(), "disk.img")
	if _, err := se.s.Clone(img, dst, ""); !errors.Is(err, ErrNotReady) || exists(dst) {
		t.Errorf("clone of the failed golden: %v", err)
	}
	err = se.s.Puller.Pull(context.Background(), "img", pg.g, env.repo(t, pg.ref))
	t.Logf("the puller's error: %v (ErrIntegrity: %v; partial kept: %v, chunks kept %v)",
		err, errors.Is(err, ErrIntegrity), exists(dir), kept)
	if err == nil {
		t.Fatal("a pull of a truncated blob succeeded")
	}

	// Positive control: the blob whole again, the pull completes,
	// fetching only what it had not kept.
	if err := os.WriteFile(blob, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := readState(dir); err == nil {
		kept = s.Verified
	} else {
		kept = nil
	}
	before := map[int]int{}
	for _, c := range pg.g.Chunks {
		before[c.Index] = se.fetches.count(c.Layer.Digest)
	}
	se.clock.Step(2 * time.Hour)
	se.ensureReady(t, img)
	checkOnDisk(t, root, "img", pg)
	for _, c := range pg.g.Chunks {
		got := se.fetches.count(c.Layer.Digest) - before[c.Index]
		if want := map[bool]int{true: 0, false: 1}[slices.Contains(kept, c.Index)]; got != want {
			t.Errorf("chunk %d fetched %d times on the resume, want %d (kept %v)", c.Index, got, want, kept)
		}
	}
}

// (d) Manifests that are not goldens, or that claim too much.

func TestResolveRefusesWhatIsNotAGolden(t *testing.T) {
	env := startRegistry(t)
	ctx := context.Background()
	repoName := env.reg.Host() + "/goldens/crafted"
	repo := env.repo(t, repoName)
	good := env.pushRandom(t, "goldens/crafted", 4, 256<<10, 6, golden.Zstd)

	// Real blobs for the crafted manifests to name (the registry checks
	// that every blob a manifest names is there).
	chunk := good.g.Chunks[0].Layer
	cfgBytes, _ := json.Marshal(golden.Config{MacOSVersion: "15.5", XcodeVersions: []string{"16.4"},
		MinimumDiskBytes: 1 << 60, DiskBytes: 1 << 60, ChunkBytes: 1 << 60})
	cfg, err := oras.PushBytes(ctx, repo, golden.ConfigMediaType, cfgBytes)
	if err != nil {
		t.Fatal(err)
	}
	aux, hw := good.g.AuxiliaryStorage, good.g.HardwareModel
	layer := func(mediaType string, uncompressed string) ocispec.Descriptor {
		return ocispec.Descriptor{MediaType: mediaType, Digest: chunk.Digest, Size: chunk.Size, Annotations: map[string]string{
			golden.AnnotationUncompressedSize:   uncompressed,
			golden.AnnotationUncompressedDigest: good.g.Chunks[0].Digest.String()}}
	}
	pushManifest := func(mediaType string, v any) string {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := oras.PushBytes(ctx, repo, mediaType, b)
		if err != nil {
			t.Fatalf("pushing a %s of %d bytes: %v", mediaType, len(b), err)
		}
		return repoName + "@" + desc.Digest.String()
	}
	goldenShaped := func(layers ...ocispec.Descriptor) ocispec.Manifest {
		return ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
			ArtifactType: golden.ArtifactType, Config: cfg, Layers: append(layers, aux, hw)}
	}
	many := func(n int, uncompressed string) []ocispec.Descriptor {
		l := make([]ocispec.Descriptor, n)
		for i := range l {
			l[i] = layer(golden.DiskMediaTypeZstd, uncompressed)
		}
		return l
	}

	bare := func(n int) []ocispec.Descriptor {
		l := make([]ocispec.Descriptor, n)
		for i := range l {
			l[i] = ocispec.Descriptor{MediaType: golden.DiskMediaTypeZstd, Digest: chunk.Digest, Size: chunk.Size}
		}
		return l
	}

	other, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, "application/vnd.example.sbom.v1",
		oras.PackManifestOptions{Layers: []ocispec.Descriptor{{MediaType: "application/vnd.example.sbom.v1+json", Digest: aux.Digest, Size: aux.Size}}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, ref, says string
		manifestGets    int
	}{
		{"other-artifact", repoName + "@" + other.Digest.String(), `artifactType is "application/vnd.example.sbom.v1"`, 1},
		{"image-index", pushManifest(ocispec.MediaTypeImageIndex, ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2},
			MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{good.g.Manifest}}), "not an OCI image manifest", 0},
		{"docker-manifest", pushManifest("application/vnd.docker.distribution.manifest.v2+json", map[string]any{
			"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
			"config": map[string]any{"mediaType": "application/vnd.docker.container.image.v1+json", "size": cfg.Size, "digest": cfg.Digest},
			"layers": []map[string]any{{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": chunk.Size, "digest": chunk.Digest}},
		}), "not an OCI image manifest", 0},
		// Bare layers: the count is refused before any layer is read.
		{"10000-layers", pushManifest(ocispec.MediaTypeImageManifest, goldenShaped(bare(10_000)...)),
			"has 10002 layers, over the limit", 1},
		{"1EiB-chunk", pushManifest(ocispec.MediaTypeImageManifest, goldenShaped(layer(golden.DiskMediaTypeZstd, strconv.FormatInt(1<<60, 10)))),
			"over the chunk limit", 1},
		{"16TiB-disk", pushManifest(ocispec.MediaTypeImageManifest, goldenShaped(many(golden.MaxChunks, strconv.FormatInt(golden.MaxChunkSize, 10))...)),
			"add up to more than the limit", 1},
	}
	root := t.TempDir()
	se := env.newStore(t, root, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env.wire.reset()
			_, err := golden.Resolve(ctx, env.repo(t, tc.ref), tc.ref)
			if !errors.Is(err, golden.ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Resolve: %v, want golden.ErrInvalid saying %q", err, tc.says)
			}
			img := macOSImage("bad-"+tc.name, tc.ref)
			st := se.await(t, img, "Failed", readyOrStuck)
			if st.Phase != fleetv1alpha1.ImageFailed || !strings.Contains(st.Message, "not a valid MacRack golden") ||
				!strings.Contains(st.Message, tc.says) {
				t.Errorf("state %+v", st)
			}
			if r := reported(t, se.s, img.Name); r.Phase != fleetv1alpha1.ImageFailed {
				t.Errorf("reported %+v", r)
			}
			// Refused from the manifest alone: no blob (not even the
			// config) was asked for, and not a byte written.
			if b := env.wire.blobs(); len(b) != 0 {
				t.Errorf("blobs fetched: %v", b)
			}
			var gets int
			for _, n := range env.wire.manifests() {
				gets += n
			}
			if want := 2 * tc.manifestGets; gets != want { // Resolve's, then the store's
				t.Errorf("%d manifest GETs, want %d", gets, want)
			}
			if got := rootEntries(t, root); len(got) != 0 {
				t.Errorf("the cache root holds %v", got)
			}
		})
	}
	// Positive control: a golden in the same repository, through the same
	// store, pulls Ready.
	se.ensureReady(t, macOSImage("good", good.ref))
	checkOnDisk(t, root, "good", good)
}

// (e) The cache's disk fills up during a pull.

func TestDiskFullDuringAPullFromTheRegistry(t *testing.T) {
	env := startRegistry(t)
	pg := env.pushRandom(t, "goldens/full", 8, 256<<10, 7, golden.Zstd)
	root := t.TempDir()
	se := env.newStore(t, root, func(s *Store) {
		s.Puller.wrapDisk = func(f *os.File) diskFile { return &fullDisk{File: f, limit: 600 << 10} }
	})
	img := macOSImage("img", pg.ref)
	st := se.await(t, img, "Failed", readyOrStuck)
	if st.Phase != fleetv1alpha1.ImageFailed || !strings.Contains(st.Message, "cache disk full") ||
		!strings.Contains(st.Message, "no space left on device") {
		t.Fatalf("state %+v", st)
	}
	if p := se.s.Puller.Progress("img"); p.Phase != PhaseFailed || !strings.Contains(p.Message, "discarded") {
		t.Errorf("puller status %+v", p)
	}
	if got := rootEntries(t, root); len(got) != 0 {
		t.Errorf("the cache root holds %v after a full disk", got)
	}
	if se.s.Puller.Ready("img", pg.g.Manifest.Digest) {
		t.Error("ready after a full disk")
	}
	if r := reported(t, se.s, "img"); r.Phase != fleetv1alpha1.ImageFailed || !strings.Contains(r.Message, "cache disk full") {
		t.Errorf("reported %+v", r)
	}
	// Positive control: room again, the store's retry pulls it.
	se.s.Puller.wrapDisk = nil
	se.clock.Step(2 * time.Hour)
	se.ensureReady(t, img)
	checkOnDisk(t, root, "img", pg)
}

// (f) The agent killed mid-pull: a new agent resumes.

func TestAgentKilledMidPullResumes(t *testing.T) {
	env := startRegistry(t)
	pg := env.pushRandom(t, "goldens/killed", 16, 256<<10, 8, golden.Zstd)
	root := t.TempDir()
	// A budget the golden fits in once, as a small chassis' cache would.
	budget := EstimatedSize(pg.g) + 256<<10
	withBudget := func(s *Store) {
		s.Puller.Concurrency = 1
		s.Budget = func() int64 { return budget }
	}
	se := env.newStore(t, root, withBudget)
	const killAt = 8
	se.fetches.setHook(func(ctx context.Context, d ocispec.Descriptor, _ int) error {
		if d.Digest != pg.g.Chunks[killAt].Layer.Digest {
			return nil
		}
		se.cancel() // the agent goes away mid-pull
		<-ctx.Done()
		return ctx.Err()
	})
	img := macOSImage("img", pg.ref)
	se.s.Ensure(img, false)
	<-se.done
	se.stop(t)
	dir := filepath.Join(root, "img")
	st, err := readState(dir)
	if err != nil {
		t.Fatalf("no state after the kill: %v", err)
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7}; !reflect.DeepEqual(st.Verified, want) || !st.Aux || !st.HardwareModel {
		t.Fatalf("state after the kill %+v, want chunks %v, aux and hardware model", st, want)
	}
	if se.s.Puller.Ready("img", pg.g.Manifest.Digest) || exists(filepath.Join(dir, readyFile)) {
		t.Fatal("ready after the kill")
	}
	if p := se.s.Puller.Progress("img"); p.Phase != PhaseFailed || !strings.Contains(p.Message, "kept for resume") {
		t.Errorf("status after the kill %+v", p)
	}
	dst := filepath.Join(t.TempDir(), "disk.img")
	if _, err := se.s.Clone(img, dst, ""); !errors.Is(err, ErrNotReady) || exists(dst) || exists(dst+".tmp") {
		t.Errorf("clone of a half-pulled golden: %v", err)
	}
	// A kept chunk damaged on disk while the agent was down.
	const damaged = 3
	c := pg.g.Chunks[damaged]
	corruptDisk(t, root, "img", c.Offset+1000, 5000)

	// A new agent: a new Store and Puller over the same root.
	se2 := env.newStore(t, root, withBudget)
	var mu sync.Mutex
	rehashed := map[int]bool{}
	se2.s.Puller.onRehash = func(i int) { mu.Lock(); rehashed[i] = true; mu.Unlock() }
	se2.ensureReady(t, img)
	checkOnDisk(t, root, "img", pg)
	want := chunkSet(pg.g, 0)
	for i := killAt; i < len(pg.g.Chunks); i++ {
		want[i] = 1
	}
	want[damaged] = 1
	checkChunkFetches(t, se2.fetches, pg.g, want, 0)
	mu.Lock()
	defer mu.Unlock()
	if len(rehashed) != killAt {
		t.Errorf("re-verified %v, want chunks 0-%d", rehashed, killAt-1)
	}
	if ev, _ := se2.evictions(); len(ev) != 0 {
		t.Errorf("evicted %v", ev)
	}
}

// countdownCtx is a context whose Err turns to Canceled after n calls: a
// copy interrupted part way.
type countdownCtx struct {
	context.Context
	n atomic.Int64
}

func (c *countdownCtx) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// The agent killed mid-clone: an interrupted copy leaves no destination,
// and what a crash leaves (a <dst>.tmp) is never taken for a disk.
func TestInterruptedCloneLeavesNoUsableDisk(t *testing.T) {
	env := startRegistry(t)
	pg := env.pushSim(t, "goldens/clone", "clone", 8<<20, 1<<20)
	root := t.TempDir()
	se := env.newStore(t, root, nil)
	img := macOSImage("img", pg.ref)
	se.ensureReady(t, img)
	goldenDisk := filepath.Join(root, "img", DiskFile)
	dir := t.TempDir()
	disk, aux := filepath.Join(dir, "disk.img"), filepath.Join(dir, "aux.img")

	// Interrupted part way: an error, no destination, no temporary.
	ctx := &countdownCtx{Context: context.Background()}
	ctx.n.Store(3)
	if err := sparseCopy(ctx, goldenDisk, disk); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted copy: %v", err)
	}
	if exists(disk) || exists(disk+".tmp") {
		t.Fatalf("an interrupted copy left %v / %v", exists(disk), exists(disk+".tmp"))
	}

	// What a crash mid-copy leaves: a <dst>.tmp, larger than the golden
	// and with bytes where the golden has holes. The clone overwrites it
	// and the disk is the golden's exactly, no larger, as sparse.
	junk := bytes.Repeat([]byte("half a clone "), 1<<20)
	if err := os.WriteFile(disk+".tmp", append(bytes.Clone(pg.disk[:4<<20]), junk...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(aux+".tmp", junk, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := se.s.Clone(img, disk, aux)
	if err != nil {
		t.Fatalf("clone over leftovers: %v", err)
	}
	t.Logf("clone method %s", m)
	for file, want := range map[string][]byte{disk: pg.disk, aux: pg.aux} {
		got, err := os.ReadFile(file)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s differs from the golden's (%d bytes, want %d; %v)", filepath.Base(file), len(got), len(want), err)
		}
		if exists(file + ".tmp") {
			t.Errorf("%s.tmp left behind", filepath.Base(file))
		}
	}
	if a, g := allocated(t, disk), allocated(t, goldenDisk); a > g+64<<10 {
		t.Errorf("the clone allocates %d bytes, the golden %d: the leftover's blocks survived", a, g)
	}
	// Positive control of the refusal: a clone over a disk that exists
	// is refused and leaves it alone.
	if _, err := se.s.Clone(img, disk, ""); !errors.Is(err, fs.ErrExist) {
		t.Errorf("clone over an existing disk: %v", err)
	}
	// Disk cloned, aux not (it exists): the disk is removed again, so no
	// half pair is left for the instance to boot.
	disk2 := filepath.Join(dir, "disk2.img")
	if _, err := se.s.Clone(img, disk2, aux); err == nil || exists(disk2) {
		t.Errorf("a clone whose aux failed: %v, disk left: %v", err, exists(disk2))
	}
}

// (g) Two instances ask for the same image at once.

func TestConcurrentEnsuresFetchEachBlobOnce(t *testing.T) {
	env := startRegistry(t)
	pg := env.pushRandom(t, "goldens/shared", 12, 256<<10, 9, golden.LZ4)
	root := t.TempDir()
	se := env.newStore(t, root, nil)
	start := make(chan struct{})
	var wg sync.WaitGroup
	states := make([]State, 4)
	for i := range states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			img := macOSImage("img", pg.ref) // each instance's own copy
			<-start
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if states[i] = se.s.Ensure(img, false); readyOrStuck(states[i]) {
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	for i, st := range states {
		if st.Phase != fleetv1alpha1.ImageReady {
			t.Errorf("instance %d: %+v", i, st)
		}
	}
	checkOnDisk(t, root, "img", pg)
	checkExactlyOnce(t, env, pg)
	checkChunkFetches(t, se.fetches, pg.g, chunkSet(pg.g, 1), 1)
}

// checkExactlyOnce asserts that the registry served every blob of pg, its
// config and its manifest exactly once, and nothing else.
func checkExactlyOnce(t *testing.T, env *regEnv, pg *pushedGolden) {
	t.Helper()
	want := map[string]int{pg.g.AuxiliaryStorage.Digest.String(): 1, pg.g.HardwareModel.Digest.String(): 1,
		pg.config.String(): 1}
	for _, c := range pg.g.Chunks {
		want[c.Layer.Digest.String()]++
	}
	if got := env.wire.blobs(); !reflect.DeepEqual(got, want) {
		t.Errorf("the registry served blobs %v, want each of the golden's once: %v", got, want)
	}
	if got := env.wire.manifests(); !reflect.DeepEqual(got, map[string]int{pg.g.Manifest.Digest.String(): 1}) {
		t.Errorf("the registry served manifests %v, want the golden's once", got)
	}
}

func TestConcurrentPullsFetchEachBlobOnce(t *testing.T) {
	env := startRegistry(t)
	pg := env.pushRandom(t, "goldens/shared-pull", 12, 256<<10, 10, golden.Zstd)
	root := t.TempDir()
	p := &Puller{Root: root, Log: testr.New(t)}
	f := newFetchCounter()
	release := make(chan struct{})
	// The first fetch waits until every Pull has joined the download.
	var once sync.Once
	f.setHook(func(context.Context, ocispec.Descriptor, int) error {
		once.Do(func() { <-release })
		return nil
	})
	const pulls = 4
	errs := make(chan error, pulls)
	for range pulls {
		src := countingTarget{ReadOnlyTarget: env.repo(t, pg.ref), c: f} // each caller's own repository
		go func() { errs <- p.Pull(context.Background(), "img", pg.g, src) }()
	}
	waitFor(t, "every Pull to join the one download", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		d := p.active["img"]
		return d != nil && d.refs == pulls
	})
	close(release)
	for range pulls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	checkOnDisk(t, root, "img", pg)
	checkChunkFetches(t, f, pg.g, chunkSet(pg.g, 1), 1)
	want := map[string]int{pg.g.AuxiliaryStorage.Digest.String(): 1, pg.g.HardwareModel.Digest.String(): 1}
	for _, c := range pg.g.Chunks {
		want[c.Layer.Digest.String()] = 1
	}
	if got := env.wire.blobs(); !reflect.DeepEqual(got, want) {
		t.Errorf("the registry served %v, want each blob once: %v", got, want)
	}
}

// (h) The budget: LRU eviction, and a pinned golden makes a pull wait.

// simGoldens pushes n simgoldens of 4 MiB (sparse: a marker per 256 KiB
// chunk).
func simGoldens(t *testing.T, env *regEnv, names ...string) map[string]*pushedGolden {
	out := map[string]*pushedGolden{}
	for _, n := range names {
		out[n] = env.pushSim(t, "goldens/"+n, n, 4<<20, 256<<10)
	}
	return out
}

func TestStoreBudgetEvictsTheLeastRecentlyUsed(t *testing.T) {
	env := startRegistry(t)
	gs := simGoldens(t, env, "a", "b", "c")
	root := t.TempDir()
	var budget atomic.Int64
	budget.Store(1 << 40)
	se := env.newStore(t, root, func(s *Store) { s.Budget = budget.Load })
	for _, n := range []string{"a", "b"} {
		se.ensureReady(t, macOSImage(n, gs[n].ref))
	}
	// a is used (an instance cloned it) after b was pulled: b is now the
	// least recently used, though pulled last.
	cloneDir := t.TempDir()
	time.Sleep(5 * time.Millisecond) // distinct mtimes
	if _, err := se.s.Clone(macOSImage("a", gs["a"].ref), filepath.Join(cloneDir, "disk.img"), filepath.Join(cloneDir, "aux.img")); err != nil {
		t.Fatal(err)
	}
	u, err := se.s.Cache.Usage()
	if err != nil {
		t.Fatal(err)
	}
	// Room for two goldens, not three.
	budget.Store(u["a"] + u["b"] + EstimatedSize(gs["c"].g) - 1)
	se.ensureReady(t, macOSImage("c", gs["c"].ref))
	ev, reasons := se.evictions()
	if !reflect.DeepEqual(ev, []string{"b"}) {
		t.Fatalf("evicted %v, want [b], the least recently used", ev)
	}
	if !strings.Contains(reasons[0], "least recently used") || !strings.Contains(reasons[0], "for c") {
		t.Errorf("eviction reason %q", reasons[0])
	}
	if got := rootEntries(t, root); !reflect.DeepEqual(got, []string{"a", "c"}) {
		t.Errorf("the cache holds %v, want [a c]", got)
	}
	imgs, usage := se.s.Report()
	if len(imgs) != 2 || usage.Budget.Value() != budget.Load() || usage.Used.Value() <= 0 || usage.Used.Value() > budget.Load() {
		t.Errorf("report %+v, %+v", imgs, usage)
	}
	if se.s.Puller.Ready("b", gs["b"].g.Manifest.Digest) {
		t.Error("b still ready after its eviction")
	}
}

func TestStorePinnedGoldenMakesThePullWait(t *testing.T) {
	env := startRegistry(t)
	gs := simGoldens(t, env, "a", "b")
	root := t.TempDir()
	var mu sync.Mutex
	pinned := map[string]bool{}
	var budget atomic.Int64
	budget.Store(1 << 40)
	se := env.newStore(t, root, func(s *Store) {
		s.Budget = budget.Load
		s.Pinned = func() map[string]bool { mu.Lock(); defer mu.Unlock(); return copyPinned(pinned) }
	})
	a := macOSImage("a", gs["a"].ref)
	se.ensureReady(t, a)
	u, err := se.s.Cache.Usage()
	if err != nil {
		t.Fatal(err)
	}
	// Room for one golden, not two; a is pinned (an instance runs it).
	budget.Store(EstimatedSize(gs["b"].g) + u["a"]/2)
	mu.Lock()
	pinned["a"] = true
	mu.Unlock()
	b := macOSImage("b", gs["b"].ref)
	st := se.await(t, b, "Waiting", readyOrStuck)
	if st.Phase != fleetv1alpha1.ImageWaiting || !strings.Contains(st.Message, "no room in the golden cache") ||
		!strings.Contains(st.Message, "pinned: a") {
		t.Fatalf("state %+v, want Waiting for room, a pinned", st)
	}
	if r := reported(t, se.s, "b"); r.Phase != fleetv1alpha1.ImageWaiting || r.Message != st.Message {
		t.Errorf("reported %+v", r)
	}
	if r := reported(t, se.s, "a"); r.Phase != fleetv1alpha1.ImageReady {
		t.Errorf("a reported %+v", r)
	}
	if ev, _ := se.evictions(); len(ev) != 0 {
		t.Errorf("evicted %v while a was pinned", ev)
	}
	if !se.s.Puller.Ready("a", gs["a"].g.Manifest.Digest) || exists(filepath.Join(root, "b")) {
		t.Errorf("a ready %v, b's directory made %v", se.s.Puller.Ready("a", gs["a"].g.Manifest.Digest), exists(filepath.Join(root, "b")))
	}
	for _, c := range gs["b"].g.Chunks {
		if n := se.fetches.count(c.Layer.Digest); n != 0 {
			t.Fatalf("b's chunk %d fetched while waiting", c.Index)
		}
	}
	// Still waiting on the next Ensure, before the retry is due.
	if st := se.s.Ensure(b, false); st.Phase != fleetv1alpha1.ImageWaiting {
		t.Errorf("state %+v", st)
	}

	// Positive control: a unpinned (its instance gone), the retry evicts
	// it and b pulls.
	mu.Lock()
	delete(pinned, "a")
	mu.Unlock()
	se.clock.Step(2 * time.Hour)
	se.ensureReady(t, b)
	if ev, reasons := se.evictions(); !reflect.DeepEqual(ev, []string{"a"}) || !strings.Contains(reasons[0], "least recently used") {
		t.Errorf("evicted %v (%q), want [a]", ev, reasons)
	}
	checkOnDisk(t, root, "b", gs["b"])
}

func copyPinned(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
