package lease

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// claimTTL bounds how long a claim waits for the cache. A claim the cache
// never shows (the MacNode deleted meanwhile) must not hold its lease.
const claimTTL = 30 * time.Second

// claims remembers the chassis this reconciler claimed, by lease UID, until
// its cache shows the claim. A reconcile that runs before the informer has
// seen the reconciler's own MacNode write would otherwise find the lease
// unbound and claim a second chassis for it.
//
// While a reconcile claims a chassis, the chassis is reserved: the other
// reconciles of the controller pass it over, as they pass over the chassis
// claimed ahead of the cache.
type claims struct {
	mu       sync.Mutex
	by       map[types.UID]claim
	reserved map[string]bool
}

// reserve reserves node for one reconcile's claim, unless another holds it
// or a claim younger than claimTTL, which the cache has not shown yet,
// names it.
func (c *claims) reserve(node string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reserved[node] {
		return false
	}
	for _, cl := range c.by {
		if cl.node == node && now.Sub(cl.at) <= claimTTL {
			return false
		}
	}
	if c.reserved == nil {
		c.reserved = map[string]bool{}
	}
	c.reserved[node] = true
	return true
}

// unreserve ends a reservation; a claim that succeeded is in by already.
func (c *claims) unreserve(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.reserved, node)
}

type claim struct {
	node string
	at   time.Time
}

// add records that lease claimed node at now.
func (c *claims) add(lease types.UID, node string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[types.UID]claim{}
	}
	c.by[lease] = claim{node: node, at: now}
}

// pending returns the node lease claimed, if the claim is younger than
// claimTTL; an older one is forgotten.
func (c *claims) pending(lease types.UID, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.by[lease]
	if !ok {
		return "", false
	}
	if now.Sub(cl.at) > claimTTL {
		delete(c.by, lease)
		return "", false
	}
	return cl.node, true
}

// done forgets lease's claim: the cache shows it.
func (c *claims) done(lease types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.by, lease)
}
