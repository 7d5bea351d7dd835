package images

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/opencontainers/go-digest"
	"k8s.io/utils/clock"
)

// ErrNotReady is a golden that is not (or not yet) complete and verified
// in the cache.
var ErrNotReady = errors.New("golden not ready in the cache")

// ErrInUse is Remove of a golden being pulled or cloned.
var ErrInUse = errors.New("golden in use")

// Cache is the golden cache's directory, <Root>/<name>/ per golden, kept
// within a byte budget. Share one Cache (by pointer) between the Puller
// (Puller.Cache) and the code that clones instances, so that a golden
// being pulled or cloned is never evicted.
type Cache struct {
	Root  string
	Clock clock.Clock
	Log   logr.Logger

	mu   sync.Mutex
	busy map[string]int
	// reserved is the size each pull in flight may reach (Reserve): a
	// second pull's MakeRoom counts it at that size, not at the bytes it
	// has written so far, and never evicts it.
	reserved map[string]int64
}

// Entry is one golden of the cache.
type Entry struct {
	Name string
	// Ready is a complete, verified golden; anything else is a partial or
	// failed download.
	Ready    bool
	Manifest digest.Digest
	// AllocatedBytes is what its files hold on disk (st_blocks*512).
	AllocatedBytes int64
	LastUsed       time.Time
	// InUse is a golden being pulled or cloned right now.
	InUse bool
}

// Files are the paths of a golden's files.
type Files struct {
	Dir, Disk, Aux, HardwareModel string
}

// Files returns where name's files are (whether or not they exist).
func (c *Cache) Files(name string) Files {
	d := filepath.Join(c.Root, name)
	return Files{Dir: d, Disk: filepath.Join(d, DiskFile), Aux: filepath.Join(d, AuxFile),
		HardwareModel: filepath.Join(d, HardwareModelFile)}
}

func (c *Cache) clock() clock.PassiveClock {
	if c.Clock == nil {
		return clock.RealClock{}
	}
	return c.Clock
}

func (c *Cache) acquire(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy == nil {
		c.busy = make(map[string]int)
	}
	c.busy[name]++
}

func (c *Cache) release(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy[name]--; c.busy[name] <= 0 {
		delete(c.busy, name)
	}
}

// Entries lists the goldens in the cache, by name.
func (c *Cache) Entries() ([]Entry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entriesLocked()
}

func (c *Cache) entriesLocked() ([]Entry, error) {
	ents, err := os.ReadDir(c.Root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, e := range ents {
		if !e.IsDir() || checkName(e.Name()) != nil {
			continue
		}
		dir := filepath.Join(c.Root, e.Name())
		alloc, err := allocatedBytes(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		en := Entry{Name: e.Name(), AllocatedBytes: alloc, InUse: c.busy[e.Name()] > 0}
		if m, ok := isReady(dir, ""); ok {
			en.Ready, en.Manifest = true, m.Manifest
		} else if s, err := readState(dir); err == nil {
			en.Manifest = s.Manifest
		}
		en.LastUsed = lastUsed(dir)
		out = append(out, en)
	}
	return out, nil
}

// Usage is the allocated bytes (what du reports) of each golden in the
// cache, partial downloads included.
func (c *Cache) Usage() (map[string]int64, error) {
	ents, err := c.Entries()
	if err != nil {
		return nil, err
	}
	m := make(map[string]int64, len(ents))
	for _, e := range ents {
		m[e.Name] = e.AllocatedBytes
	}
	return m, nil
}

// Touch records that name was used (cloned) now: the mtime of its
// last-used file, which survives restarts.
func (c *Cache) Touch(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	dir := filepath.Join(c.Root, name)
	if _, err := os.Stat(dir); err != nil {
		return err
	}
	return touchFile(filepath.Join(dir, lastUsedFile), c.clock().Now())
}

// LastUsed is when name was last cloned (or else became ready).
func (c *Cache) LastUsed(name string) (time.Time, error) {
	if err := checkName(name); err != nil {
		return time.Time{}, err
	}
	dir := filepath.Join(c.Root, name)
	if _, err := os.Stat(dir); err != nil {
		return time.Time{}, err
	}
	return lastUsed(dir), nil
}

func lastUsed(dir string) time.Time {
	for _, f := range []string{lastUsedFile, readyFile, stateFile} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return fi.ModTime()
		}
	}
	if fi, err := os.Stat(dir); err == nil {
		return fi.ModTime()
	}
	return time.Time{}
}

func touchFile(path string, t time.Time) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chtimes(path, t, t)
}

// MakeRoom evicts goldens until the cache's usage plus need fits within
// budget (allocated bytes: a sparse disk counts only its allocated
// blocks): partial and failed downloads first, then ready goldens least
// recently used first, never one in pinned nor one being pulled or
// cloned. When that cannot make enough room it evicts nothing and
// returns a *NoRoomError. It returns the names evicted.
func (c *Cache) MakeRoom(need, budget int64, pinned map[string]bool) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.makeRoomLocked(need, budget, pinned)
}

// Reserve is MakeRoom for a pull of name that may add need bytes, and
// holds that room until release: until then a concurrent MakeRoom counts
// name at the size it will reach and never evicts it. Without it two
// pulls that start together each see the other's few bytes written so
// far, and both fit a budget that holds one.
func (c *Cache) Reserve(name string, need, budget int64, pinned map[string]bool) (evicted []string, release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	evicted, err = c.makeRoomLocked(need, budget, pinned)
	if err != nil {
		return evicted, nil, err
	}
	have, _ := allocatedBytes(filepath.Join(c.Root, name))
	if c.reserved == nil {
		c.reserved = make(map[string]int64)
	}
	c.reserved[name] = have + need
	var once sync.Once
	return evicted, func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			delete(c.reserved, name)
		})
	}, nil
}

func (c *Cache) makeRoomLocked(need, budget int64, pinned map[string]bool) ([]string, error) {
	c.sweepTrash()
	ents, err := c.entriesLocked()
	if err != nil {
		return nil, err
	}
	var used int64
	var held []string
	var candidates []Entry
	seen := make(map[string]bool, len(ents))
	for _, e := range ents {
		seen[e.Name] = true
		r, inFlight := c.reserved[e.Name]
		used += max(e.AllocatedBytes, r)
		if pinned[e.Name] || e.InUse || inFlight {
			held = append(held, e.Name)
			continue
		}
		candidates = append(candidates, e)
	}
	for name, r := range c.reserved {
		if !seen[name] { // reserved, no byte written yet
			used += r
			held = append(held, name)
		}
	}
	if used+need <= budget {
		return nil, nil
	}
	sort.Slice(candidates, func(i, j int) bool {
		a, b := candidates[i], candidates[j]
		if a.Ready != b.Ready {
			return !a.Ready
		}
		if !a.LastUsed.Equal(b.LastUsed) {
			return a.LastUsed.Before(b.LastUsed)
		}
		return a.Name < b.Name
	})
	var freed int64
	k := 0
	for k < len(candidates) && used-freed+need > budget {
		freed += candidates[k].AllocatedBytes
		k++
	}
	if used-freed+need > budget {
		sort.Strings(held)
		return nil, &NoRoomError{Need: need, Budget: budget, Used: used, Pinned: held}
	}
	var evicted []string
	for _, e := range candidates[:k] {
		if err := removeDir(filepath.Join(c.Root, e.Name)); err != nil {
			return evicted, fmt.Errorf("evict %s: %w", e.Name, err)
		}
		c.Log.Info("Evicted golden", "image", e.Name, "ready", e.Ready, "bytes", e.AllocatedBytes,
			"lastUsed", e.LastUsed)
		evicted = append(evicted, e.Name)
	}
	return evicted, nil
}

// sweepTrash deletes what an interrupted removal left behind.
func (c *Cache) sweepTrash() {
	ents, err := os.ReadDir(c.Root)
	if err != nil {
		return
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), trashPrefix) {
			os.RemoveAll(filepath.Join(c.Root, e.Name()))
		}
	}
}

// Remove evicts name now, unless it is being pulled or cloned.
func (c *Cache) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy[name] > 0 {
		return fmt.Errorf("%w: %s", ErrInUse, name)
	}
	return removeDir(filepath.Join(c.Root, name))
}

// Clone clones ready golden name (at manifest) for an instance: its disk
// to diskDst and, unless auxDst is empty, its aux storage to auxDst, with
// cl (DefaultCloner when nil). It records the use for LRU eviction and
// keeps the golden from eviction while it runs. The method is the disk's.
func (c *Cache) Clone(name string, manifest digest.Digest, diskDst, auxDst string, cl Cloner) (Method, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	c.acquire(name)
	defer c.release(name)
	f := c.Files(name)
	if _, ok := isReady(f.Dir, manifest); !ok || manifest == "" {
		return "", fmt.Errorf("%w: %s@%s", ErrNotReady, name, manifest)
	}
	if cl == nil {
		cl = DefaultCloner(c.Log)
	}
	m, err := cl.Clone(f.Disk, diskDst)
	if err != nil {
		return m, err
	}
	if auxDst != "" {
		if _, err := cl.Clone(f.Aux, auxDst); err != nil {
			os.Remove(diskDst)
			return m, err
		}
	}
	if err := c.Touch(name); err != nil {
		c.Log.Error(err, "Cannot record golden use", "image", name)
	}
	return m, nil
}
