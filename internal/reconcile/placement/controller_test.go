package placement

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
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

func setup(t *testing.T, vms int32, objs ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, fleetv1alpha1.AddToScheme, leasingv1alpha1.AddToScheme, computev1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	engine, err := policy.Load(context.Background(), policies.FS, policy.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	class := &fleetv1alpha1.MacNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "m4"},
		Spec: fleetv1alpha1.MacNodeClassSpec{Chip: "M4", Memory: resource.MustParse("16Gi"), Disk: resource.MustParse("1T"), NetworkGbps: 10, VMCapacity: vms}}
	lease := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "t", UID: "lease-uid"},
		Spec:   leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
		Status: leasingv1alpha1.MacNodeLeaseStatus{Phase: leasingv1alpha1.LeaseBound, NodeName: "c02a", Serial: "C02A"}}
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: "c02a"},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02A", NodeClassName: "m4"},
		Status: fleetv1alpha1.MacNodeStatus{Phase: fleetv1alpha1.MacNodeLeased, Binding: &fleetv1alpha1.Binding{
			LeaseNamespace: "t", LeaseName: "l", LeaseUID: "lease-uid", BoundAt: metav1.NewTime(t0), EarliestReleaseAt: metav1.NewTime(t0.Add(24 * time.Hour))}}}
	b := fake.NewClientBuilder().WithScheme(s).WithObjects(append([]client.Object{class, lease, mn}, objs...)...).
		WithStatusSubresource(&fleetv1alpha1.MacNode{}, &computev1alpha1.MacOSInstance{})
	for _, ix := range index.Definitions() {
		b = b.WithIndex(ix.Object, ix.Name, ix.Value)
	}
	c := b.Build()
	return &Reconciler{Checker: intent.Checker{Client: c, Engine: engine, Clock: clocktesting.NewFakeClock(t0),
		Params: policy.Params{AgentsNamespace: "macrack-agents"}, Identity: "operator"}, Recorder: events.NewFakeRecorder(100)}, c
}

func instance(name string, created time.Duration) *computev1alpha1.MacOSInstance {
	return &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "t", UID: types.UID("uid-" + name),
		CreationTimestamp: metav1.NewTime(t0.Add(created))},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "l", ImageName: "img", CPU: 4}}
}

func reconcileNode(t *testing.T, r *Reconciler) {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "c02a"}}); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, c client.Client, name string) *computev1alpha1.MacOSInstance {
	t.Helper()
	i := &computev1alpha1.MacOSInstance{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "t", Name: name}, i); err != nil {
		t.Fatal(err)
	}
	return i
}

// Three instances wait on a chassis of two VMs: placement alone, with no
// admission, claims two slots and places two.
// Proves: instance.cap
func TestThreeWaitingInstancesGetTwoSlotsOldestFirst(t *testing.T) {
	r, c := setup(t, 2, instance("third", 3*time.Second), instance("first", time.Second), instance("second", 2*time.Second))
	reconcileNode(t, r)
	mn := &fleetv1alpha1.MacNode{}
	_ = c.Get(context.Background(), types.NamespacedName{Name: "c02a"}, mn)
	if len(mn.Status.Slots) != 2 || mn.Status.Slots[0].Name != "first" || mn.Status.Slots[1].Name != "second" {
		t.Fatalf("want slots for first and second, got %+v", mn.Status.Slots)
	}
	for _, n := range []string{"first", "second"} {
		if got := get(t, c, n).Status.NodeName; got != "c02a" {
			t.Fatalf("%s not placed: %q", n, got)
		}
	}
	third := get(t, c, "third")
	if third.Status.NodeName != "" {
		t.Fatal("a third instance was placed")
	}
	if len(third.Status.Conditions) != 1 || third.Status.Conditions[0].Reason != computev1alpha1.ReasonCapacityExceeded {
		t.Fatalf("want Placed=False CapacityExceeded, got %+v", third.Status.Conditions)
	}
}

func TestAOneVMClassPlacesOne(t *testing.T) {
	r, c := setup(t, 1, instance("first", time.Second), instance("second", 2*time.Second))
	reconcileNode(t, r)
	if get(t, c, "second").Status.NodeName != "" || get(t, c, "first").Status.NodeName == "" {
		t.Fatal("want exactly the first placed on a one-VM class")
	}
}

func TestASlotIsFreedWhenItsInstanceIsGoneAndTheNextIsPlaced(t *testing.T) {
	r, c := setup(t, 2, instance("a", time.Second), instance("b", 2*time.Second), instance("c", 3*time.Second))
	reconcileNode(t, r)
	if err := c.Delete(context.Background(), get(t, c, "a")); err != nil {
		t.Fatal(err)
	}
	reconcileNode(t, r)
	if got := get(t, c, "c").Status.NodeName; got != "c02a" {
		t.Fatalf("the freed slot went nowhere; c is on %q", got)
	}
}

func TestACacheErrorIsRetriedNeverShownAsCapacity(t *testing.T) {
	r, c := setup(t, 2, instance("first", time.Second))
	broken := errors.New("cache not synced")
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, isClass := obj.(*fleetv1alpha1.MacNodeClass); isClass {
				return broken
			}
			return cl.Get(ctx, key, obj, opts...)
		},
	})
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "c02a"}})
	if !errors.Is(err, broken) {
		t.Fatalf("want the cache error returned for a retry, got %v", err)
	}
	if conds := get(t, c, "first").Status.Conditions; len(conds) != 0 {
		t.Fatalf("a cache error reached the tenant: %+v", conds)
	}

	// Positive control: with the cache back, the instance is placed.
	r.Client = c
	reconcileNode(t, r)
	if get(t, c, "first").Status.NodeName != "c02a" {
		t.Fatal("not placed once the cache answers")
	}
}

func TestAMissingClassSaysSoNotCapacity(t *testing.T) {
	r, c := setup(t, 2, instance("first", time.Second))
	if err := c.Delete(context.Background(), &fleetv1alpha1.MacNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "m4"}}); err != nil {
		t.Fatal(err)
	}
	reconcileNode(t, r)
	first := get(t, c, "first")
	if first.Status.NodeName != "" || len(first.Status.Conditions) != 1 || first.Status.Conditions[0].Reason != computev1alpha1.ReasonClassNotFound {
		t.Fatalf("want Placed=False ClassNotFound, got %+v on %q", first.Status.Conditions, first.Status.NodeName)
	}
}

// quarantine moves the chassis into a quarantine step, as the quarantine
// loop would, keeping its binding and slots.
func quarantine(t *testing.T, c client.Client, phase fleetv1alpha1.MacNodePhase, q *fleetv1alpha1.QuarantineStatus, slots ...fleetv1alpha1.Slot) {
	t.Helper()
	mn := &fleetv1alpha1.MacNode{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: "c02a"}, mn); err != nil {
		t.Fatal(err)
	}
	mn.Status.Phase = phase
	mn.Status.Quarantine = q
	if slots != nil {
		mn.Status.Slots = slots
	}
	if err := c.Status().Update(context.Background(), mn); err != nil {
		t.Fatal(err)
	}
}

func slotsOf(t *testing.T, c client.Client) []fleetv1alpha1.Slot {
	t.Helper()
	mn := &fleetv1alpha1.MacNode{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: "c02a"}, mn); err != nil {
		t.Fatal(err)
	}
	return mn.Status.Slots
}

// A chassis under quarantine, in each of its forms, with one instance
// placed before the quarantine and one created before it but not yet
// placed: placement, with no admission, claims no slot for the waiting one,
// which stays unplaced and says why, naming the rule, the serial and the
// phase; the placed instance keeps its slot. Positive control: once the
// chassis recovers, the same instance is placed.
// Proves: quarantine.fence
func TestAChassisUnderQuarantineClaimsNoSlot(t *testing.T) {
	stuck := func() *fleetv1alpha1.QuarantineStatus {
		return &fleetv1alpha1.QuarantineStatus{BootID: "boot-1", Evidence: "VZErrorDomain code 6 with 1 VM running", QuarantinedAt: metav1.NewTime(t0)}
	}
	attention := stuck()
	attention.NeedsAttention = true
	for _, c := range []struct {
		name  string
		phase fleetv1alpha1.MacNodePhase
		q     *fleetv1alpha1.QuarantineStatus
		says  string
	}{
		{"Quarantined", fleetv1alpha1.MacNodeQuarantined, stuck(),
			"quarantine.fence: chassis C02A is Quarantined: its kernel VM quota stuck and MacRack is rebooting it; no slot is claimed on it until it recovers, and this instance waits unplaced until then"},
		{"Rebooting", fleetv1alpha1.MacNodeRebooting, stuck(), "quarantine.fence: chassis C02A is Rebooting: "},
		{"Leased with an active quarantine", fleetv1alpha1.MacNodeLeased, stuck(), "quarantine.fence: chassis C02A is under quarantine (phase Leased): "},
		{"Quarantined and waiting for a person", fleetv1alpha1.MacNodeQuarantined, attention,
			"quarantine.fence: chassis C02A is Quarantined: its kernel VM quota stuck more than 3 times in 24 hours and it waits for a person to repair it; "},
	} {
		t.Run(c.name, func(t *testing.T) {
			placed := instance("a", time.Second)
			placed.Status.NodeName = "c02a"
			r, cl := setup(t, 2, placed, instance("b", 2*time.Second))
			slotA := fleetv1alpha1.Slot{Namespace: "t", Name: "a", UID: "uid-a"}
			quarantine(t, cl, c.phase, c.q, slotA)

			reconcileNode(t, r)
			reconcileNode(t, r) // a second pass changes nothing either
			if got := slotsOf(t, cl); len(got) != 1 || got[0] != slotA {
				t.Fatalf("want only a's slot, kept; got %+v", got)
			}
			b := get(t, cl, "b")
			if b.Status.NodeName != "" {
				t.Fatalf("b was placed on %q under quarantine", b.Status.NodeName)
			}
			if len(b.Status.Conditions) != 1 || b.Status.Conditions[0].Type != computev1alpha1.ConditionPlaced ||
				b.Status.Conditions[0].Status != metav1.ConditionFalse || b.Status.Conditions[0].Reason != ReasonChassisQuarantined ||
				!strings.HasPrefix(b.Status.Conditions[0].Message, c.says) {
				t.Fatalf("want Placed=False %s saying %q, got %+v", ReasonChassisQuarantined, c.says, b.Status.Conditions)
			}
			if get(t, cl, "a").Status.NodeName != "c02a" {
				t.Fatal("the instance placed before the quarantine lost its placement")
			}

			// Positive control: the probe passed, the chassis is Leased again.
			recovered := c.q.DeepCopy()
			recovered.RecoveredAt = &metav1.Time{Time: t0.Add(10 * time.Minute)}
			recovered.NeedsAttention = false
			quarantine(t, cl, fleetv1alpha1.MacNodeLeased, recovered)
			reconcileNode(t, r)
			b = get(t, cl, "b")
			if b.Status.NodeName != "c02a" || b.Status.Conditions[0].Reason != computev1alpha1.ReasonPlaced {
				t.Fatalf("not placed once the chassis recovered: %q %+v", b.Status.NodeName, b.Status.Conditions)
			}
			if got := slotsOf(t, cl); len(got) != 2 {
				t.Fatalf("want a's and b's slots, got %+v", got)
			}
		})
	}
}

// An instance that claimed its slot just before the quarantine, its
// placement not yet written, keeps the slot: the fence claims nothing new
// and takes nothing away.
func TestAQuarantineTakesNoSlotAway(t *testing.T) {
	r, c := setup(t, 2, instance("a", time.Second))
	slotA := fleetv1alpha1.Slot{Namespace: "t", Name: "a", UID: "uid-a"}
	quarantine(t, c, fleetv1alpha1.MacNodeRebooting,
		&fleetv1alpha1.QuarantineStatus{BootID: "boot-1", Evidence: "VZErrorDomain code 6", QuarantinedAt: metav1.NewTime(t0)}, slotA)
	reconcileNode(t, r)
	if got := slotsOf(t, c); len(got) != 1 || got[0] != slotA {
		t.Fatalf("the quarantine took a claimed slot away: %+v", got)
	}
}

// One pass that claims two slots and refuses a third instance writes each
// object once: the MacNode's slots, then each instance; a second pass,
// with nothing new, writes nothing.
func TestAPassWritesEachObjectOnce(t *testing.T) {
	r, c := setup(t, 2, instance("first", time.Second), instance("second", 2*time.Second), instance("third", 3*time.Second))
	writes := map[string]int{}
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			writes[obj.GetName()]++
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			writes[obj.GetName()]++
			return cl.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
		// A placement is applied.
		SubResourceApply: func(ctx context.Context, cl client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			writes[obj.(interface{ GetName() string }).GetName()]++
			return cl.SubResource(sub).Apply(ctx, obj, opts...)
		},
	})
	reconcileNode(t, r)
	want := map[string]int{"c02a": 1, "first": 1, "second": 1, "third": 1}
	if len(writes) != len(want) {
		t.Fatalf("want one status write each of %v, got %v", want, writes)
	}
	for name, n := range want {
		if writes[name] != n {
			t.Fatalf("want one status write each of %v, got %v", want, writes)
		}
	}
	// Positive control of the counting: the writes did land.
	if get(t, c, "first").Status.NodeName != "c02a" || len(slotsOf(t, c)) != 2 {
		t.Fatal("the pass's writes did not land")
	}

	clear(writes)
	reconcileNode(t, r)
	if len(writes) != 0 {
		t.Fatalf("a steady pass wrote %v", writes)
	}
}

// listedBy is the field index a List asks, or "".
func listedBy(opts []client.ListOption) string {
	lo := &client.ListOptions{}
	lo.ApplyOptions(opts)
	if lo.FieldSelector == nil {
		return ""
	}
	for _, r := range lo.FieldSelector.Requirements() {
		return r.Field
	}
	return ""
}

// The pass after two claims reads the informer cache twice: the chassis'
// instances, then the lease's. b's placement reaches the cache between the
// two reads, so the first still sees b unplaced (the by-node index does
// not list it) and the second sees it placed (not waiting). b is then on
// neither list; the pass must not take its slot away, or the agent never
// runs b (placed, without a slot) and nothing claims one for it again.
// Positive control: once b is really gone, its slot is freed.
func TestAPlacementSeenBetweenTheTwoReadsKeepsItsSlot(t *testing.T) {
	r, c := setup(t, 2, instance("a", time.Second), instance("b", 2*time.Second))
	reconcileNode(t, r)
	if got := slotsOf(t, c); len(got) != 2 || get(t, c, "b").Status.NodeName != "c02a" {
		t.Fatalf("want a and b placed on two slots, got %+v", got)
	}

	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := cl.List(ctx, list, opts...); err != nil {
				return err
			}
			if l, ok := list.(*computev1alpha1.MacOSInstanceList); ok && listedBy(opts) == index.InstanceByNode {
				// The first read: b's placement is not in the cache yet.
				l.Items = slices.DeleteFunc(l.Items, func(i computev1alpha1.MacOSInstance) bool { return i.Name == "b" })
			}
			return nil
		},
	})
	reconcileNode(t, r)
	if got := slotsOf(t, c); len(got) != 2 || got[1].Name != "b" {
		t.Fatalf("a placement seen between the two reads lost its slot: %+v", got)
	}

	r.Client = c
	if err := c.Delete(context.Background(), get(t, c, "b")); err != nil {
		t.Fatal(err)
	}
	reconcileNode(t, r)
	if got := slotsOf(t, c); len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("b is gone, want a's slot alone, got %+v", got)
	}
}
