package images

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	clocktesting "k8s.io/utils/clock/testing"
	"oras.land/oras-go/v2/content"

	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// cacheFixture pulls ready goldens a, b, c and a partial download d into
// one root, and uses them in the order b, c, a (d after all of them).
func cacheFixture(t *testing.T) (*Cache, *clocktesting.FakeClock, map[string]*testGolden) {
	root := t.TempDir()
	fc := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	c := &Cache{Root: root, Clock: fc, Log: testr.New(t)}
	p := newPuller(t, root)
	gs := map[string]*testGolden{}
	for i, n := range []string{"a", "b", "c"} {
		gs[n] = buildGolden(t, smallDisk(uint64(100+i)), testChunk)
		if err := p.Pull(context.Background(), n, gs[n].g, gs[n].store); err != nil {
			t.Fatal(err)
		}
	}
	gs["d"] = buildGolden(t, uniqueDisk(104), testChunk) // partial: cut at chunk 3
	ctx, cancel := context.WithCancel(context.Background())
	f := newFetcher(gs["d"].store)
	f.hook = cancelDuring(gs["d"], 3, cancel)
	p.Concurrency = 1
	if err := p.Pull(ctx, "d", gs["d"].g, f); !errors.Is(err, context.Canceled) {
		t.Fatalf("partial pull: %v", err)
	}
	for _, n := range []string{"b", "c", "a", "d"} {
		fc.Step(time.Hour)
		if err := c.Touch(n); err != nil {
			t.Fatal(err)
		}
	}
	return c, fc, gs
}

// smallDisk is three chunks and a bit, none alike.
func smallDisk(seed uint64) []byte { return uniqueDisk(seed)[:3*testChunk+5000] }

func usage(t *testing.T, c *Cache) (map[string]int64, int64) {
	t.Helper()
	u, err := c.Usage()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, n := range u {
		total += n
	}
	return u, total
}

func present(c *Cache) []string {
	var s []string
	for _, n := range []string{"a", "b", "c", "d"} {
		if exists(filepath.Join(c.Root, n)) {
			s = append(s, n)
		}
	}
	return s
}

func TestCacheUsageAndEntries(t *testing.T) {
	c, fc, gs := cacheFixture(t)
	u, _ := usage(t, c)
	for n, tg := range gs {
		if u[n] <= 0 || u[n] >= int64(len(tg.disk))+int64(len(tg.aux))+64<<10 {
			t.Errorf("%s: usage %d, disk %d", n, u[n], len(tg.disk))
		}
		if n != "d" && u[n] != allocated(t, filepath.Join(c.Root, n)) {
			t.Errorf("%s: usage %d is not du's", n, u[n])
		}
	}
	ents, err := c.Entries()
	if err != nil {
		t.Fatal(err)
	}
	ready := map[string]bool{}
	for _, e := range ents {
		ready[e.Name] = e.Ready
	}
	if !reflect.DeepEqual(ready, map[string]bool{"a": true, "b": true, "c": true, "d": false}) {
		t.Errorf("ready %v", ready)
	}
	if lu, err := c.LastUsed("d"); err != nil || !lu.Equal(fc.Now()) {
		t.Errorf("last used of d %v, %v; want %v", lu, err, fc.Now())
	}
}

func TestMakeRoomEvictsPartialThenLRU(t *testing.T) {
	c, _, _ := cacheFixture(t)
	u, total := usage(t, c)
	// Room within budget: nothing goes.
	if ev, err := c.MakeRoom(1, total+1, nil); err != nil || len(ev) != 0 {
		t.Fatalf("evicted %v, %v", ev, err)
	}
	// One byte short: the partial download goes first, though used last.
	ev, err := c.MakeRoom(1, total, nil)
	if err != nil || !reflect.DeepEqual(ev, []string{"d"}) {
		t.Fatalf("evicted %v, %v; want [d]", ev, err)
	}
	// Then the least recently used: b, then c.
	total -= u["d"]
	ev, err = c.MakeRoom(u["b"]+1, total, nil)
	if err != nil || !reflect.DeepEqual(ev, []string{"b", "c"}) {
		t.Fatalf("evicted %v, %v; want [b c]", ev, err)
	}
	if got := present(c); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("left %v", got)
	}
}

func TestMakeRoomNeverPinned(t *testing.T) {
	c, _, _ := cacheFixture(t)
	u, total := usage(t, c)
	// b is the LRU ready golden, but pinned; d in use (being pulled).
	c.acquire("d")
	defer c.release("d")
	ev, err := c.MakeRoom(1, total, map[string]bool{"b": true})
	if err != nil || !reflect.DeepEqual(ev, []string{"c"}) {
		t.Fatalf("evicted %v, %v; want [c]", ev, err)
	}
	if err := c.Remove("d"); !errors.Is(err, ErrInUse) {
		t.Errorf("remove of an in-use golden: %v", err)
	}
	_ = u
}

func TestMakeRoomNoRoomEvictsNothing(t *testing.T) {
	c, _, _ := cacheFixture(t)
	u, total := usage(t, c)
	before := present(c)
	// Room only by evicting pinned a: refused whole, though evicting b, c
	// and d would have helped.
	need := total - u["a"] + 1
	_, err := c.MakeRoom(need, total, map[string]bool{"a": true})
	var nr *NoRoomError
	if !errors.As(err, &nr) || nr.Need != need || nr.Budget != total || nr.Used != total ||
		!reflect.DeepEqual(nr.Pinned, []string{"a"}) {
		t.Fatalf("error %#v", err)
	}
	if got := present(c); !reflect.DeepEqual(got, before) {
		t.Errorf("left %v, want %v: a NoRoomError evicts nothing", got, before)
	}
	// More than the whole budget.
	if _, err := c.MakeRoom(total+1, total, nil); !errors.As(err, &nr) {
		t.Fatalf("error %v", err)
	}
	if got := present(c); !reflect.DeepEqual(got, before) {
		t.Errorf("left %v", got)
	}
	// Positive control: the same need without the pin fits.
	if ev, err := c.MakeRoom(need, total, nil); err != nil || len(ev) == 0 {
		t.Fatalf("evicted %v, %v", ev, err)
	}
}

// Two pulls that start together: the first's reservation counts at the
// size it will reach, not the nothing it has written, so the second does
// not fit a budget that holds one; once the first ends, it does.
func TestReserveCountsAPullInFlight(t *testing.T) {
	c, _, _ := cacheFixture(t)
	_, total := usage(t, c)
	const need = 1 << 20
	budget := total + need + need/2 // room for one pull, not two
	pinAll := map[string]bool{"a": true, "b": true, "c": true, "d": true}
	ev, release, err := c.Reserve("first", need, budget, pinAll)
	if err != nil || len(ev) != 0 {
		t.Fatalf("first reservation: evicted %v, %v", ev, err)
	}
	_, _, err = c.Reserve("second", need, budget, pinAll)
	var nr *NoRoomError
	if !errors.As(err, &nr) || nr.Used != total+need || !reflect.DeepEqual(nr.Pinned, []string{"a", "b", "c", "d", "first"}) {
		t.Fatalf("second reservation beside the first: %#v; want a NoRoomError counting first's %d bytes, first held", err, need)
	}
	if _, err := c.MakeRoom(need, budget, pinAll); !errors.As(err, &nr) {
		t.Fatalf("MakeRoom beside a reservation: %v; want a NoRoomError", err)
	}
	release()
	release() // twice is harmless
	_, release2, err := c.Reserve("second", need, budget, pinAll)
	if err != nil {
		t.Fatalf("positive control: once the first pull ends (writing nothing), the second fits: %v", err)
	}
	release2()
}

// The store holds the cache to its budget: it makes room before the
// Puller writes a byte.
func TestPullMakesRoomWithinBudget(t *testing.T) {
	c, _, _ := cacheFixture(t)
	_, total := usage(t, c)
	tg := buildGolden(t, smallDisk(110), testChunk)
	p := newPuller(t, c.Root)
	p.Cache = c
	budget := total + EstimatedSize(tg.g) - 1 // one golden must go
	s := &Store{Puller: p, Cache: c, Log: logr.Discard(),
		Pinned: func() map[string]bool { return map[string]bool{"a": true} },
		Budget: func() int64 { return budget }}
	// pull is the store's: room first, then the Puller.
	pull := func(name string, g *golden.Golden, src content.Fetcher) error {
		release, err := s.makeRoom(name, g)
		if err != nil {
			return err
		}
		defer release()
		return p.Pull(context.Background(), name, g, src)
	}
	if err := pull("e", tg.g, tg.store); err != nil {
		t.Fatal(err)
	}
	if got := present(c); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("left %v, want d evicted", got)
	}
	// Too small a budget: a NoRoomError, and nothing fetched or evicted.
	tg2 := buildGolden(t, smallDisk(111), testChunk)
	f := newFetcher(tg2.store)
	budget = 1
	var nr *NoRoomError
	if err := pull("f", tg2.g, f); !errors.As(err, &nr) {
		t.Fatalf("pull error %v, want NoRoomError", err)
	}
	if f.total() != 0 || !reflect.DeepEqual(present(c), []string{"a", "b", "c"}) {
		t.Errorf("fetched %d, left %v", f.total(), present(c))
	}
}

func TestCacheClone(t *testing.T) {
	c, fc, gs := cacheFixture(t)
	dst := t.TempDir()
	fc.Step(time.Hour)
	m, err := c.Clone("b", gs["b"].g.Manifest.Digest, filepath.Join(dst, "disk.img"), filepath.Join(dst, "aux.img"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("clone method %s", m)
	for file, want := range map[string][]byte{"disk.img": gs["b"].disk, "aux.img": gs["b"].aux} {
		got, err := os.ReadFile(filepath.Join(dst, file))
		if err != nil || string(got) != string(want) {
			t.Fatalf("%s differs (%v)", file, err)
		}
	}
	if lu, _ := c.LastUsed("b"); !lu.Equal(fc.Now()) {
		t.Errorf("clone did not touch b: %v", lu)
	}
	// b is now the most recently used: c is the LRU ready golden.
	_, total := usage(t, c)
	if ev, err := c.MakeRoom(1, total, map[string]bool{"d": true}); err != nil || !reflect.DeepEqual(ev, []string{"c"}) {
		t.Errorf("evicted %v, %v; want [c]", ev, err)
	}
	if _, err := c.Clone("d", gs["d"].g.Manifest.Digest, filepath.Join(dst, "d.img"), "", nil); !errors.Is(err, ErrNotReady) {
		t.Errorf("clone of a partial download: %v", err)
	}
	if _, err := c.Clone("a", gs["b"].g.Manifest.Digest, filepath.Join(dst, "x.img"), "", nil); !errors.Is(err, ErrNotReady) {
		t.Errorf("clone with another manifest: %v", err)
	}
}
