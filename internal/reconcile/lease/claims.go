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
type claims struct {
	mu sync.Mutex
	by map[types.UID]claim
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
