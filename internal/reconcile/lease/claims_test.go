package lease

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
)

// staleCache reads MacNodes as an informer that has not yet seen the
// reconciler's own claim would: no binding anywhere.
type staleCache struct {
	client.Client
	stale bool
}

func (c *staleCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	nodes, ok := list.(*fleetv1alpha1.MacNodeList)
	if !c.stale || !ok {
		return nil
	}
	var unbound []fleetv1alpha1.MacNode
	for _, n := range nodes.Items {
		if n.Status.Binding != nil {
			n.Status.Binding, n.Status.Phase = nil, fleetv1alpha1.MacNodeReady
		}
		unbound = append(unbound, n)
	}
	nodes.Items = unbound
	return nil
}

func bindingOf(t *testing.T, c client.Client, name string) *fleetv1alpha1.Binding {
	t.Helper()
	n := &fleetv1alpha1.MacNode{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n.Status.Binding
}

// TestACacheBehindItsOwnClaimNeverBindsASecondChassis: a reconcile that runs
// before the cache shows the reconciler's own claim waits for it; it never
// claims another chassis for the same lease, nor claims the first again.
func TestACacheBehindItsOwnClaimNeverBindsASecondChassis(t *testing.T) {
	f := newFixture(t, class("m4"), readyNode("a", nil), readyNode("b", nil), newLease("24h"))
	cache := &staleCache{Client: f.c}
	f.r.Client = cache
	f.reconcile(t)
	first := bindingOf(t, f.c, "a")
	if first == nil || first.LeaseUID != "lease-uid" {
		t.Fatalf("positive control: the lease binds chassis a, got %+v", first)
	}

	cache.stale = true
	f.clock.Step(time.Second)
	if res := f.reconcile(t); res.RequeueAfter != conflict.RetryAfter {
		t.Fatalf("a reconcile behind its own claim must wait and requeue, got %+v", res)
	}
	if b := bindingOf(t, f.c, "b"); b != nil {
		t.Fatalf("a second chassis was bound to the lease: %+v", b)
	}
	if again := bindingOf(t, f.c, "a"); !again.BoundAt.Equal(&first.BoundAt) {
		t.Fatalf("chassis a was claimed again: boundAt %v, first %v", again.BoundAt, first.BoundAt)
	}

	// Once the cache shows the claim, the lease is Bound to a, and the claim
	// is forgotten.
	cache.stale = false
	f.reconcile(t)
	if l := f.lease(t); l.Status.NodeName != "a" {
		t.Fatalf("want the lease on a, got %q", l.Status.NodeName)
	}
	if _, ok := f.r.claims.pending("lease-uid", f.clock.Now()); ok {
		t.Fatal("the claim outlived the cache catching up")
	}
}

// TestAClaimTheCacheNeverShowsExpires: a claim whose MacNode the cache never
// shows (deleted meanwhile) stops holding its lease after claimTTL.
func TestAClaimTheCacheNeverShowsExpires(t *testing.T) {
	var c claims
	c.add("l", "a", t0)
	if node, ok := c.pending("l", t0.Add(claimTTL)); !ok || node != "a" {
		t.Fatalf("a claim within claimTTL must hold: %q %v", node, ok)
	}
	if _, ok := c.pending("l", t0.Add(claimTTL+time.Second)); ok {
		t.Fatal("a claim past claimTTL must be forgotten")
	}
}

// TestClaimsReserve: a chassis one reconcile is claiming, or has claimed
// ahead of the cache, is passed over by the others, and free again once
// the reservation ends or the claim grows older than claimTTL.
func TestClaimsReserve(t *testing.T) {
	var c claims
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	if !c.reserve("a", now) {
		t.Fatal("positive control: a free chassis is not reserved")
	}
	if c.reserve("a", now) {
		t.Error("a chassis reserved twice")
	}
	if !c.reserve("b", now) {
		t.Error("another chassis is not reserved while a is")
	}
	c.unreserve("a")
	if !c.reserve("a", now) {
		t.Error("a is not reserved again after its reservation ended")
	}
	c.unreserve("a")
	c.add("lease-1", "a", now)
	if c.reserve("a", now.Add(claimTTL)) {
		t.Error("a chassis claimed ahead of the cache is reserved")
	}
	if !c.reserve("a", now.Add(claimTTL+time.Second)) {
		t.Error("a claim older than claimTTL still holds its chassis")
	}
}
