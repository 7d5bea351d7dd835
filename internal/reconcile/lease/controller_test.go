package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/intent"
	"github.com/boualleiguie/macrack-operator/policies"
)

var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{fleetv1alpha1.AddToScheme, leasingv1alpha1.AddToScheme, computev1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

type fixture struct {
	r     *Reconciler
	c     client.Client
	clock *clocktesting.FakeClock
}

// newFixture builds the reconciler over a fake client: narrow cases only;
// the envtest suites cover the API server, webhooks and races.
func newFixture(t *testing.T, objs ...client.Object) *fixture {
	t.Helper()
	engine, err := policy.Load(context.Background(), policies.FS, policy.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(objs...).
		WithStatusSubresource(&fleetv1alpha1.MacNode{}, &leasingv1alpha1.MacNodeLease{}, &computev1alpha1.MacOSInstance{})
	for _, ix := range index.Definitions() {
		b = b.WithIndex(ix.Object, ix.Name, ix.Value)
	}
	c := b.Build()
	clk := clocktesting.NewFakeClock(t0)
	return &fixture{c: c, clock: clk, r: &Reconciler{
		Checker: intent.Checker{Client: c, Engine: engine, Clock: clk,
			Params: policy.Params{AgentsNamespace: "macrack-agents", OperatorUsername: "operator"}, Identity: "operator"},
		Recorder: events.NewFakeRecorder(100),
	}}
}

func class(name string) *fleetv1alpha1.MacNodeClass {
	return &fleetv1alpha1.MacNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fleetv1alpha1.MacNodeClassSpec{Chip: "M4", Memory: resource.MustParse("16Gi"), Disk: resource.MustParse("1T"), NetworkGbps: 10, VMCapacity: 2}}
}

func readyNode(name string, releasedAt *time.Time) *fleetv1alpha1.MacNode {
	n := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: name, NodeClassName: "m4"},
		Status: fleetv1alpha1.MacNodeStatus{Phase: fleetv1alpha1.MacNodeReady,
			// Its agent reports it empty: released, it may return to the pool.
			Reported: &fleetv1alpha1.ReportedFacts{Inventory: &fleetv1alpha1.HostInventory{}}}}
	if releasedAt != nil {
		n.Status.History = []fleetv1alpha1.LeaseRecord{{LeaseNamespace: "x", LeaseName: "y", ReleasedAt: metav1.NewTime(*releasedAt)}}
	}
	return n
}

func newLease(d string) *leasingv1alpha1.MacNodeLease {
	return &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "l1", Namespace: "tenant-a", UID: "lease-uid"},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: d}}
}

func (f *fixture) reconcile(t *testing.T) ctrl.Result {
	t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "tenant-a", Name: "l1"}})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

// deleteLeaseAfter moves the clock on by d, then deletes the lease as its
// tenant would.
func (f *fixture) deleteLeaseAfter(t *testing.T, d time.Duration) {
	t.Helper()
	f.clock.Step(d)
	if err := f.c.Delete(context.Background(), f.lease(t)); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) lease(t *testing.T) *leasingv1alpha1.MacNodeLease {
	t.Helper()
	l := &leasingv1alpha1.MacNodeLease{}
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: "tenant-a", Name: "l1"}, l); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestBindingPicksTheChassisReleasedLongestAgo(t *testing.T) {
	older, newer := t0.Add(-48*time.Hour), t0.Add(-time.Hour)
	f := newFixture(t, class("m4"), readyNode("b-recent", &newer), readyNode("a-old", &older), readyNode("c-recent", &newer), newLease("36h"))
	f.reconcile(t)
	l := f.lease(t)
	if l.Status.Phase != leasingv1alpha1.LeaseBound || l.Status.NodeName != "a-old" {
		t.Fatalf("want Bound to a-old, got %s on %q", l.Status.Phase, l.Status.NodeName)
	}
	if want := t0.Add(36 * time.Hour); !l.Status.EarliestReleaseAt.Time.Equal(want) {
		t.Fatalf("earliestReleaseAt %v, want boundAt + 36h = %v", l.Status.EarliestReleaseAt, want)
	}
	n := &fleetv1alpha1.MacNode{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Name: "a-old"}, n); err != nil || n.Status.Binding == nil || n.Status.Binding.LeaseUID != "lease-uid" {
		t.Fatalf("the MacNode binding must name the lease: %+v %v", n.Status.Binding, err)
	}
}

func TestLengtheningABoundLeaseExtendsTheBinding(t *testing.T) {
	f := newFixture(t, class("m4"), readyNode("a", nil), newLease("24h"))
	f.reconcile(t)
	l := f.lease(t)
	l.Spec.MinimumDuration = "48h"
	if err := f.c.Update(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	want := t0.Add(48 * time.Hour)
	if got := f.lease(t).Status.EarliestReleaseAt; !got.Time.Equal(want) {
		t.Fatalf("lease earliestReleaseAt %v, want %v", got, want)
	}
	n := &fleetv1alpha1.MacNode{}
	_ = f.c.Get(context.Background(), client.ObjectKey{Name: "a"}, n)
	if !n.Status.Binding.EarliestReleaseAt.Time.Equal(want) {
		t.Fatalf("the binding, which is authoritative, must move too: %v", n.Status.Binding.EarliestReleaseAt)
	}
}

func TestANeverLeasedChassisGoesFirst(t *testing.T) {
	older := t0.Add(-48 * time.Hour)
	f := newFixture(t, class("m4"), readyNode("a-used", &older), readyNode("z-new", nil), newLease("24h"))
	f.reconcile(t)
	if got := f.lease(t).Status.NodeName; got != "z-new" {
		t.Fatalf("want the never-leased z-new, got %q", got)
	}
}

func TestALeaseWithoutCapacityWaitsAndSaysWhy(t *testing.T) {
	busy := readyNode("a", nil)
	busy.Status.Phase = fleetv1alpha1.MacNodeEnrolled
	f := newFixture(t, class("m4"), busy, newLease("24h"))
	f.reconcile(t)
	l := f.lease(t)
	if l.Status.Phase != leasingv1alpha1.LeasePending {
		t.Fatalf("want Pending, got %s", l.Status.Phase)
	}
	c := findCondition(l.Status.Conditions, leasingv1alpha1.ConditionBound)
	if c == nil || c.Reason != leasingv1alpha1.ReasonNoCapacity || c.ObservedGeneration != l.Generation {
		t.Fatalf("want Bound=False NoCapacity, got %+v", c)
	}
}

func TestAnUnknownClassSaysSo(t *testing.T) {
	f := newFixture(t, newLease("24h"))
	f.reconcile(t)
	c := findCondition(f.lease(t).Status.Conditions, leasingv1alpha1.ConditionBound)
	if c == nil || c.Reason != leasingv1alpha1.ReasonClassNotFound {
		t.Fatalf("want ClassNotFound, got %+v", c)
	}
}

func TestADeleteBeforeEarliestReleaseHoldsAndRequeuesAtIt(t *testing.T) {
	f := newFixture(t, class("m4"), readyNode("a", nil), newLease("24h"))
	f.reconcile(t)
	f.deleteLeaseAfter(t, 3*time.Hour)
	res := f.reconcile(t)
	l := f.lease(t)
	if l.Status.Phase != leasingv1alpha1.LeaseHeld || l.Status.HeldAt == nil {
		t.Fatalf("want Held with heldAt, got %s %v", l.Status.Phase, l.Status.HeldAt)
	}
	if res.RequeueAfter != 21*time.Hour {
		t.Fatalf("want a requeue at earliestReleaseAt, 21h away by the injected clock, got %v", res.RequeueAfter)
	}
}

// withAnInstanceToWipe is a 24h lease of chassis a, bound on the first
// pass, with an instance whose disk its agent has not wiped yet.
func withAnInstanceToWipe(t *testing.T) (*fixture, *computev1alpha1.MacOSInstance) {
	t.Helper()
	inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "ci-1", Namespace: "tenant-a", Finalizers: []string{fleetv1alpha1.DiskWipeFinalizer}},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "l1"}}
	return newFixture(t, class("m4"), readyNode("a", nil), newLease("24h"), inst), inst
}

func TestReleaseWaitsForTheDiskWipes(t *testing.T) {
	f, inst := withAnInstanceToWipe(t)
	f.reconcile(t)
	f.deleteLeaseAfter(t, 25*time.Hour)
	f.reconcile(t)
	l := f.lease(t)
	if c := findCondition(l.Status.Conditions, leasingv1alpha1.ConditionReleased); c == nil || c.Reason != leasingv1alpha1.ReasonAwaitingDiskWipe {
		t.Fatalf("want Released=False AwaitingDiskWipe, got %+v", c)
	}
	n := &fleetv1alpha1.MacNode{}
	_ = f.c.Get(context.Background(), client.ObjectKey{Name: "a"}, n)
	if n.Status.Binding == nil {
		t.Fatal("the chassis left the tenant before its instance was wiped")
	}
	// The agent wipes the disk and removes its finalizer.
	got := &computev1alpha1.MacOSInstance{}
	_ = f.c.Get(context.Background(), client.ObjectKeyFromObject(inst), got)
	got.Finalizers = nil
	if err := f.c.Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	_ = f.c.Get(context.Background(), client.ObjectKey{Name: "a"}, n)
	if n.Status.Binding != nil || len(n.Status.History) != 1 {
		t.Fatalf("want the binding cleared into history, got %+v", n.Status)
	}
}

// A Held lease stays Held through its release, once earliestReleaseAt has
// passed and the disks are being wiped: it never shows Bound again, and its
// journal never records a second bound.
func TestAHeldLeaseStaysHeldUntilReleased(t *testing.T) {
	f, _ := withAnInstanceToWipe(t)
	f.reconcile(t)
	f.deleteLeaseAfter(t, time.Hour)
	f.reconcile(t)
	if p := f.lease(t).Status.Phase; p != leasingv1alpha1.LeaseHeld {
		t.Fatalf("deleted before earliestReleaseAt: %s, want Held", p)
	}
	f.clock.Step(24 * time.Hour)
	f.reconcile(t)
	l := f.lease(t)
	if c := findCondition(l.Status.Conditions, leasingv1alpha1.ConditionReleased); c == nil || c.Reason != leasingv1alpha1.ReasonAwaitingDiskWipe {
		t.Fatalf("positive control: the release is under way, want Released=False AwaitingDiskWipe, got %+v", c)
	}
	if l.Status.Phase != leasingv1alpha1.LeaseHeld {
		t.Errorf("released while its disk is wiped: phase %s, want Held until Released", l.Status.Phase)
	}
	bound := 0
	for _, r := range l.Status.Audit.Records {
		if r.Type == "bound" {
			bound++
		}
	}
	if bound != 1 {
		t.Errorf("the journal has %d bound records, want 1", bound)
	}
}

// A lease deleted after earliestReleaseAt was never Held: it stays Bound
// until Released.
func TestALeaseDeletedAfterItsFloorIsBoundUntilReleased(t *testing.T) {
	f, _ := withAnInstanceToWipe(t)
	f.reconcile(t)
	f.deleteLeaseAfter(t, 25*time.Hour)
	f.reconcile(t)
	if l := f.lease(t); l.Status.Phase != leasingv1alpha1.LeaseBound || l.Status.HeldAt != nil {
		t.Fatalf("deleted after earliestReleaseAt, wiping: %s (heldAt %v), want Bound and never held", l.Status.Phase, l.Status.HeldAt)
	}
}

func findCondition(list []metav1.Condition, t string) *metav1.Condition {
	for i := range list {
		if list[i].Type == t {
			return &list[i]
		}
	}
	return nil
}

// ObservedGeneration is stamped only by a pass that succeeded, as in
// cluster-api's machine controller: a failed pass still writes the
// conditions it observed, but not that it saw this generation through.
func TestObservedGenerationOnlyWhenThePassSucceeds(t *testing.T) {
	l := newLease("24h")
	l.Generation = 3
	f := newFixture(t, class("m4"), readyNode("n1", nil), l)
	failing := true
	f.r.Client = interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, isClass := obj.(*fleetv1alpha1.MacNodeClass); isClass && failing {
				return errors.New("the cache is gone")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	if _, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "tenant-a", Name: "l1"}}); err == nil {
		t.Fatal("a pass that could not read the class succeeded")
	}
	got := f.lease(t)
	if got.Status.ObservedGeneration != 0 {
		t.Fatalf("a failed pass stamped observedGeneration %d", got.Status.ObservedGeneration)
	}
	if findCondition(got.Status.Conditions, leasingv1alpha1.ConditionBound) == nil {
		t.Fatal("the failed pass wrote no status at all: the check above proves nothing")
	}

	// Positive control: the same pass, succeeding, stamps it.
	failing = false
	f.reconcile(t)
	if got := f.lease(t); got.Status.ObservedGeneration != got.Generation || got.Generation == 0 {
		t.Fatalf("a pass that succeeded stamped observedGeneration %d at generation %d", got.Status.ObservedGeneration, got.Generation)
	}
}
