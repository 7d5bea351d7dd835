package admission

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// turns lets one admission at a time decide on a lease in this replica.
// Concurrent creates on one lease would otherwise all read the same room,
// all write, and all but one conflict and start again, each conflicting
// write a round trip through the API server and this webhook. Replicas
// still race, and the lease's resourceVersion still settles that. The map
// holds only leases with an admission in flight.
type turns struct {
	mu     sync.Mutex
	leases map[client.ObjectKey]*turn
}

type turn struct {
	held  chan struct{}
	users int
}

// take waits for the lease's turn, or for ctx; release gives it back.
func (t *turns) take(ctx context.Context, key client.ObjectKey) (release func(), err error) {
	t.mu.Lock()
	if t.leases == nil {
		t.leases = map[client.ObjectKey]*turn{}
	}
	tn := t.leases[key]
	if tn == nil {
		tn = &turn{held: make(chan struct{}, 1)}
		t.leases[key] = tn
	}
	tn.users++
	t.mu.Unlock()
	leave := func() {
		t.mu.Lock()
		if tn.users--; tn.users == 0 {
			delete(t.leases, key)
		}
		t.mu.Unlock()
	}
	select {
	case tn.held <- struct{}{}:
		return func() { <-tn.held; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

// inFlight is how many leases have an admission waiting or deciding.
func (t *turns) inFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.leases)
}
