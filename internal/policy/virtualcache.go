package policy

import (
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// virtualCache is OPA's cache of the rules' values within one evaluation
// (topdown.VirtualCache), flat: every frame's entries in one slice, each
// a rule's whole reference, its hash and its value. OPA's own is a tree
// with a hash map per reference element, so that caching
// data.partial.macrack.lib.new builds five maps: a tenth of a decision's
// allocations; a map per frame was still a seventh of pod.shape's bytes
// (BENCHMARKS.md, issue 38). A frame holds a few dozen rules at most, so a
// scan of their hashes is cheaper than any map, and the slices are reused
// across evaluations (acquire, release). The answers are the same: Get
// finds a value only under the reference it was put under, in the top
// frame.
//
// Each entry's reference is a copy, held in terms: OPA hands Put the
// buffer it builds a function call's key in (evalFunc.cacheKey), pooled and
// cleared after the call, and OPA's tree keeps the key's terms, not the
// slice. An entry that kept the slice held whatever the buffer held next:
// a call keyed in another buffer missed the result (instance.image parsed
// its image's minimum disk twice, in lib.quantity), and the entry compared
// equal to any later key of the same hash built in its buffer.
type virtualCache struct {
	entries []virtualCacheEntry
	// terms hold the entries' references, back to back.
	terms []*ast.Term
	// frames are where each frame's entries and terms start; the top
	// frame's run to the ends of entries and terms.
	frames []virtualCacheFrame
}

type virtualCacheFrame struct{ entries, terms int }

type virtualCacheEntry struct {
	hash      int
	ref       ast.Ref
	value     *ast.Term
	undefined bool
}

var virtualCaches = sync.Pool{New: func() any { return &virtualCache{} }}

// acquireVirtualCache is an empty cache for one evaluation; release it
// when the evaluation has returned.
func acquireVirtualCache() *virtualCache {
	c := virtualCaches.Get().(*virtualCache)
	c.Push()
	return c
}

// release empties the cache, so that it holds nothing of the request, and
// returns it to the pool.
func (c *virtualCache) release() {
	clear(c.entries)
	clear(c.terms)
	c.entries, c.terms, c.frames = c.entries[:0], c.terms[:0], c.frames[:0]
	virtualCaches.Put(c)
}

func newVirtualCache() *virtualCache {
	c := &virtualCache{}
	c.Push()
	return c
}

func (c *virtualCache) Push() {
	c.frames = append(c.frames, virtualCacheFrame{entries: len(c.entries), terms: len(c.terms)})
}

func (c *virtualCache) Pop() {
	f := c.frames[len(c.frames)-1]
	clear(c.entries[f.entries:])
	clear(c.terms[f.terms:])
	c.entries, c.terms, c.frames = c.entries[:f.entries], c.terms[:f.terms], c.frames[:len(c.frames)-1]
}

func (c *virtualCache) top() []virtualCacheEntry {
	return c.entries[c.frames[len(c.frames)-1].entries:]
}

// Get reports the value cached for ref: (value, false) if defined, (nil,
// true) if recorded as undefined, (nil, false) if not cached.
func (c *virtualCache) Get(ref ast.Ref) (*ast.Term, bool) {
	h := ref.Hash()
	for _, e := range c.top() {
		if e.hash == h && e.ref.Equal(ref) {
			if e.undefined {
				return nil, true
			}
			return e.value, false
		}
	}
	return nil, false
}

// Put caches value for ref; a nil value records ref as undefined.
func (c *virtualCache) Put(ref ast.Ref, value *ast.Term) {
	h := ref.Hash()
	top := c.top()
	for i := range top {
		if e := &top[i]; e.hash == h && e.ref.Equal(ref) {
			if value != nil {
				e.value = value
			} else {
				e.undefined = true
			}
			return
		}
	}
	start := len(c.terms)
	c.terms = append(c.terms, ref...)
	own := c.terms[start:len(c.terms):len(c.terms)]
	c.entries = append(c.entries, virtualCacheEntry{hash: h, ref: own, value: value, undefined: value == nil})
}

// Keys lists the references with a cached value in the top frame.
func (c *virtualCache) Keys() []ast.Ref {
	var keys []ast.Ref
	for _, e := range c.top() {
		if e.value != nil {
			keys = append(keys, e.ref)
		}
	}
	return keys
}
