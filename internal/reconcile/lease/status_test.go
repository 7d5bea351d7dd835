package lease

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// Every condition updateStatus sets carries a reason, in every phase: the
// API server refuses a condition without one, and a refused status write
// once held a never-bound lease's finalizer forever.
func TestEveryConditionHasAReasonInEveryPhase(t *testing.T) {
	bound := &fleetv1alpha1.MacNode{
		ObjectMeta: metav1.ObjectMeta{Name: "c02t00000001"},
		Spec:       fleetv1alpha1.MacNodeSpec{Serial: "C02T00000001", NodeClassName: "m4"},
		Status: fleetv1alpha1.MacNodeStatus{Binding: &fleetv1alpha1.Binding{LeaseNamespace: "t", LeaseName: "l",
			BoundAt: metav1.NewTime(t0), EarliestReleaseAt: metav1.NewTime(t0.Add(24 * time.Hour))}},
	}
	deleted := metav1.NewTime(t0.Add(time.Hour))
	boundAt := metav1.NewTime(t0)
	for _, tc := range []struct {
		name     string
		deleting bool
		boundAt  *metav1.Time
		s        scope
	}{
		{name: "a new lease waiting for a chassis, before any phase ran"},
		{name: "a pending lease without capacity", s: scope{pendingReason: leasingv1alpha1.ReasonNoCapacity, pendingMessage: "none free"}},
		{name: "a pending lease of an unknown class", s: scope{pendingReason: leasingv1alpha1.ReasonClassNotFound, pendingMessage: "no class"}},
		{name: "a lease deleted before it ever bound", deleting: true},
		{name: "a bound lease", s: scope{node: bound}},
		{name: "a held lease", deleting: true, s: scope{node: bound}},
		{name: "a lease waiting for disk wipes", deleting: true, s: scope{node: bound, awaiting: 2}},
		{name: "a lease whose chassis still holds a VM", deleting: true, s: scope{node: bound, holds: "chassis C02T00000001 still holds 1 VM(s): u (Running)"}},
		{name: "a lease released from a retired chassis", deleting: true, boundAt: &boundAt, s: scope{released: true, retired: true}},
		{name: "a released lease", deleting: true, boundAt: &boundAt, s: scope{released: true}},
		{name: "a lease whose binding is gone", deleting: true, boundAt: &boundAt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lease := &leasingv1alpha1.MacNodeLease{
				ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "t", Generation: 1},
				Spec:       leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
				Status:     leasingv1alpha1.MacNodeLeaseStatus{BoundAt: tc.boundAt},
			}
			if tc.deleting {
				lease.DeletionTimestamp = &deleted
			}
			s := tc.s
			if s.released {
				lease.Status.Phase = leasingv1alpha1.LeaseReleased // as release writes it
			}
			s.lease, s.now = lease, t0.Add(2*time.Hour)
			r := &Reconciler{Recorder: events.NewFakeRecorder(10)}
			r.updateStatus(&s)
			if len(lease.Status.Conditions) != 4 {
				t.Fatalf("want Bound, ChassisAvailable, Held and Released set on every pass, got %+v", lease.Status.Conditions)
			}
			for _, c := range lease.Status.Conditions {
				if c.Reason == "" || c.Message == "" {
					t.Errorf("condition %s=%s has reason %q and message %q", c.Type, c.Status, c.Reason, c.Message)
				}
			}
			if lease.Status.Phase == "" {
				t.Errorf("no phase")
			}
		})
	}
}
