package index

import (
	"slices"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Count holds how many objects of one informer carry each key, as a field
// index would group them, for a reader that needs only the number: a read
// is a map lookup, where listing an index copies out every object it holds.
// It is fed by the informer's events (Handler), so it agrees with the cache
// once its registration has synced.
type Count struct {
	keys func(client.Object) []string

	mu sync.RWMutex
	n  map[string]int
}

// NewCount counts objects by keys(object), each key once per object.
func NewCount(keys func(client.Object) []string) *Count {
	return &Count{keys: keys, n: map[string]int{}}
}

// Get is how many objects carry key.
func (c *Count) Get(key string) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.n[key]
}

// Handler is the informer event handler that keeps the count. changed, if
// not nil, is called with each key whose count an event changed, after the
// count changed: a reconcile it enqueues reads the new number.
func (c *Count) Handler(changed func(key string)) toolscache.ResourceEventHandler {
	return countHandler{c: c, changed: changed}
}

type countHandler struct {
	c       *Count
	changed func(string)
}

func (h countHandler) OnAdd(obj any, _ bool) { h.apply(nil, h.keysOf(obj)) }

func (h countHandler) OnUpdate(oldObj, newObj any) { h.apply(h.keysOf(oldObj), h.keysOf(newObj)) }

func (h countHandler) OnDelete(obj any) { h.apply(h.keysOf(obj), nil) }

func (h countHandler) keysOf(obj any) []string {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(client.Object)
	if !ok {
		return nil
	}
	keys := slices.Clone(h.c.keys(o))
	slices.Sort(keys)
	return slices.Compact(keys)
}

// apply moves the object from the keys it had to the keys it has.
func (h countHandler) apply(had, has []string) {
	if slices.Equal(had, has) {
		return // a resync, or a write that left its keys as they were
	}
	var moved []string
	h.c.mu.Lock()
	for _, k := range had {
		if _, still := slices.BinarySearch(has, k); !still {
			if h.c.n[k]--; h.c.n[k] <= 0 {
				delete(h.c.n, k)
			}
			moved = append(moved, k)
		}
	}
	for _, k := range has {
		if _, before := slices.BinarySearch(had, k); !before {
			h.c.n[k]++
			moved = append(moved, k)
		}
	}
	h.c.mu.Unlock()
	if h.changed != nil {
		for _, k := range moved {
			h.changed(k)
		}
	}
}
