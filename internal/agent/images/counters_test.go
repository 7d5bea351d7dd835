package images

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	clocktesting "k8s.io/utils/clock/testing"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// countersOf is name's counters as the store reports them; the zero value
// (with the name) when it reports none.
func countersOf(s *Store, name string) fleetv1alpha1.ImagePullCounters {
	for _, c := range s.PullCounters() {
		if c.Name == name {
			return c
		}
	}
	return fleetv1alpha1.ImagePullCounters{Name: name}
}

// A pull that completes counts once, with the bytes it fetched and the
// time it took by the puller's clock; a Pull of the golden once it is
// ready fetches nothing and counts nothing.
func TestACompletedPullCountsItsBytesAndItsTime(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, uniqueDisk(40), testChunk)
	fc := clocktesting.NewFakeClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	f := newFetcher(tg.store)
	// Every fetch takes a second of the puller's clock.
	f.hook = func(context.Context, ocispec.Descriptor, int) (io.ReadCloser, error, bool) {
		fc.Step(time.Second)
		return nil, nil, false
	}
	p := newPuller(t, root)
	p.Clock = fc
	s := &Store{Puller: p, Clock: fc}
	if got := s.PullCounters(); len(got) != 0 {
		t.Fatalf("before any pull: %+v, want none", got)
	}
	if err := p.Pull(context.Background(), "img", tg.g, f); err != nil {
		t.Fatal(err)
	}
	fetches := f.total()
	want := fleetv1alpha1.ImagePullCounters{Name: "img", Pulls: 1, PullMilliseconds: int64(fetches) * 1000, Bytes: bytesTotal(tg.g)}
	if got := countersOf(s, "img"); got != want {
		t.Fatalf("after the pull: %+v, want %+v (%d fetches of a second each)", got, want, fetches)
	}
	if err := p.Pull(context.Background(), "img", tg.g, f); err != nil {
		t.Fatal(err)
	}
	if got := countersOf(s, "img"); got != want {
		t.Fatalf("after a Pull of the ready golden: %+v, want %+v unchanged", got, want)
	}
}

// bytes counts what crossed the network: a chunk fetched twice, after its
// connection dropped half-way, counts one and a half times. A pull that
// fails counts its bytes, and no pull.
func TestPullBytesCountRetriesAndFailures(t *testing.T) {
	root := t.TempDir()
	tg := buildGolden(t, uniqueDisk(41), testChunk)
	c3 := tg.g.Chunks[3]
	half := tg.chunks[3][:len(tg.chunks[3])/2]
	f := newFetcher(tg.store)
	f.hook = func(_ context.Context, d ocispec.Descriptor, attempt int) (io.ReadCloser, error, bool) {
		if d.Digest == c3.Layer.Digest && attempt == 1 {
			return &errAfterReader{data: half, err: io.ErrUnexpectedEOF}, nil, true
		}
		return nil, nil, false
	}
	p := newPuller(t, root)
	s := &Store{Puller: p}
	if err := p.Pull(context.Background(), "img", tg.g, f); err != nil {
		t.Fatal(err)
	}
	if got, want := countersOf(s, "img"), bytesTotal(tg.g)+int64(len(half)); got.Bytes != want || got.Pulls != 1 {
		t.Fatalf("after a retried chunk: %+v, want bytes %d and 1 pull", got, want)
	}

	bad := buildGolden(t, uniqueDisk(42), testChunk)
	fb := newFetcher(bad.store)
	fb.hook = func(_ context.Context, d ocispec.Descriptor, _ int) (io.ReadCloser, error, bool) {
		if d.Digest == bad.g.Chunks[0].Layer.Digest {
			// Its size, not its bytes: only the digest check catches it.
			return bytesReader(make([]byte, d.Size)), nil, true
		}
		return nil, nil, false
	}
	if err := p.Pull(context.Background(), "bad", bad.g, fb); err == nil {
		t.Fatal("a corrupt chunk pulled")
	}
	if got := countersOf(s, "bad"); got.Pulls != 0 || got.PullMilliseconds != 0 || got.Bytes <= 0 {
		t.Fatalf("after a failed pull: %+v, want its bytes and no pull", got)
	}
	if got := countersOf(s, "img"); got.Pulls != 1 {
		t.Fatalf("a failed pull of another golden counted on img: %+v", got)
	}
}

// The counters of an earlier run are added to this run's, whatever came
// first; a cache hit counts on its golden; the report is by name.
func TestSeededCountersAddUpWithThisRunsAndCacheHits(t *testing.T) {
	s := &Store{Puller: &Puller{Root: t.TempDir()}}
	s.CountCacheHit("sonoma")
	s.SeedPullCounters([]fleetv1alpha1.ImagePullCounters{
		{Name: "sonoma", Pulls: 2, PullMilliseconds: 90_000, Bytes: 1 << 30, CacheHits: 3},
		{Name: "sequoia", Pulls: 1, PullMilliseconds: 45_000, Bytes: 1 << 29},
		{Name: "../escape", Pulls: 9}, // never a name of the cache
		{Name: "negative", Pulls: -5, Bytes: -1},
	})
	s.CountCacheHit("sequoia")
	s.CountCacheHit("sequoia")
	got := s.PullCounters()
	want := []fleetv1alpha1.ImagePullCounters{
		{Name: "negative"},
		{Name: "sequoia", Pulls: 1, PullMilliseconds: 45_000, Bytes: 1 << 29, CacheHits: 2},
		{Name: "sonoma", Pulls: 2, PullMilliseconds: 90_000, Bytes: 1 << 30, CacheHits: 4},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counters %+v, want %+v", got, want)
	}
}

// The report holds at most MaxImagePullCounters goldens: the least
// recently counted one goes first.
func TestPullCountersAreBoundedByTheSchema(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	s := &Store{Puller: &Puller{Root: t.TempDir()}, Clock: fc}
	for i := range fleetv1alpha1.MaxImagePullCounters {
		s.CountCacheHit(fmt.Sprintf("img-%02d", i))
		fc.Step(time.Second)
	}
	s.CountCacheHit("img-00") // the oldest is counted again: img-01 is now the oldest
	fc.Step(time.Second)
	if n := len(s.PullCounters()); n != fleetv1alpha1.MaxImagePullCounters {
		t.Fatalf("control: %d goldens, want %d", n, fleetv1alpha1.MaxImagePullCounters)
	}
	s.CountCacheHit("img-new")
	got := s.PullCounters()
	if len(got) != fleetv1alpha1.MaxImagePullCounters {
		t.Fatalf("%d goldens, want %d", len(got), fleetv1alpha1.MaxImagePullCounters)
	}
	names := map[string]int64{}
	for _, c := range got {
		names[c.Name] = c.CacheHits
	}
	if _, ok := names["img-01"]; ok {
		t.Error("img-01, the least recently counted, is still reported")
	}
	if names["img-00"] != 2 || names["img-new"] != 1 {
		t.Errorf("img-00 %d hits, img-new %d, want 2 and 1", names["img-00"], names["img-new"])
	}
}
