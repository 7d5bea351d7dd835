package policy

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// virtualCache is OPA's cache of the rules' values within one evaluation
// (topdown.VirtualCache), flat: each frame maps a rule's whole reference to
// its value. OPA's own is a tree with a hash map per reference element, so
// that caching data.partial.macrack.lib.new builds five maps; those maps
// were a tenth of a decision's allocations (BENCHMARKS.md, issue 38). The
// answers are the same: Get finds a value only under the reference it was
// put under, in the top frame.
type virtualCache struct {
	frames []map[int][]virtualCacheEntry
}

type virtualCacheEntry struct {
	ref       ast.Ref
	value     *ast.Term
	undefined bool
}

func newVirtualCache() *virtualCache {
	c := &virtualCache{}
	c.Push()
	return c
}

func (c *virtualCache) Push() { c.frames = append(c.frames, nil) }

func (c *virtualCache) Pop() { c.frames = c.frames[:len(c.frames)-1] }

// Get reports the value cached for ref: (value, false) if defined, (nil,
// true) if recorded as undefined, (nil, false) if not cached.
func (c *virtualCache) Get(ref ast.Ref) (*ast.Term, bool) {
	for _, e := range c.frames[len(c.frames)-1][ref.Hash()] {
		if e.ref.Equal(ref) {
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
	top := &c.frames[len(c.frames)-1]
	if *top == nil {
		*top = map[int][]virtualCacheEntry{}
	}
	h := ref.Hash()
	entries := (*top)[h]
	for i := range entries {
		if entries[i].ref.Equal(ref) {
			if value != nil {
				entries[i].value = value
			} else {
				entries[i].undefined = true
			}
			return
		}
	}
	(*top)[h] = append(entries, virtualCacheEntry{ref: ref, value: value, undefined: value == nil})
}

// Keys lists the references with a cached value in the top frame.
func (c *virtualCache) Keys() []ast.Ref {
	var keys []ast.Ref
	for _, entries := range c.frames[len(c.frames)-1] {
		for _, e := range entries {
			if e.value != nil {
				keys = append(keys, e.ref)
			}
		}
	}
	return keys
}
