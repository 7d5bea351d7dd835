package lease

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// orphanedNode is a chassis whose binding names tenant-a/l1 by a UID no
// lease has: a lease of that name went without its finalizer.
func orphanedNode() *fleetv1alpha1.MacNode {
	n := readyNode("orphan", nil)
	n.Status.Phase = fleetv1alpha1.MacNodeLeased
	n.Status.Binding = &fleetv1alpha1.Binding{LeaseNamespace: "tenant-a", LeaseName: "l1", LeaseUID: "gone-uid",
		BoundAt: metav1.NewTime(t0.Add(-time.Hour)), EarliestReleaseAt: metav1.NewTime(t0.Add(23 * time.Hour))}
	return n
}

func (f *fixture) node(t *testing.T, name string) *fleetv1alpha1.MacNode {
	t.Helper()
	n := &fleetv1alpha1.MacNode{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The binding is the lease controller's, an orphaned one's included: it
// holds the chassis until earliestReleaseAt, and is then cleared into the
// history by this controller, under the key that still names it, with
// the lease gone or another lease of the same name in its place.
func TestAnOrphanedBindingHoldsUntilEarliestReleaseAtThenGoes(t *testing.T) {
	for _, tc := range []struct {
		name string
		objs []client.Object
	}{
		{"the lease is gone", nil},
		{"another lease of the same name took its place", []client.Object{newLease("24h")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, append([]client.Object{class("m4"), orphanedNode()}, tc.objs...)...)
			res := f.reconcile(t)
			if got := f.node(t, "orphan"); got.Status.Binding == nil || got.Status.Binding.LeaseUID != "gone-uid" {
				t.Fatalf("before earliestReleaseAt the binding went: %+v", got.Status.Binding)
			}
			if res.RequeueAfter != 23*time.Hour {
				t.Fatalf("requeued after %s, want at earliestReleaseAt, 23h on", res.RequeueAfter)
			}

			f.clock.Step(23 * time.Hour)
			f.reconcile(t)
			got := f.node(t, "orphan")
			if got.Status.Binding != nil {
				t.Fatalf("after earliestReleaseAt the orphaned binding stays: %+v", got.Status.Binding)
			}
			if h := got.Status.History; len(h) != 1 || h[0].LeaseUID != "gone-uid" {
				t.Fatalf("history %+v, want the gone lease recorded", h)
			}
			if got.Status.Phase != fleetv1alpha1.MacNodeLeased {
				t.Errorf("the lease controller wrote the phase %s: it is the node controller's", got.Status.Phase)
			}
		})
	}
}

// Positive control: the binding of the lease that has the key now is not
// an orphan, whatever the clock says.
func TestABindingOfTheLiveLeaseIsNoOrphan(t *testing.T) {
	n := orphanedNode()
	n.Status.Binding.LeaseUID = "lease-uid"
	f := newFixture(t, class("m4"), n, newLease("24h"))
	f.clock.Step(48 * time.Hour)
	f.reconcile(t)
	if got := f.node(t, "orphan"); got.Status.Binding == nil || got.Status.Binding.LeaseUID != "lease-uid" {
		t.Fatalf("the live lease's binding went: %+v", got.Status.Binding)
	}
}
