package chassis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/index"
)

func TestFreedRecordsTheLeaseAndBoundsTheHistory(t *testing.T) {
	now := time.Date(2026, 6, 2, 13, 0, 0, 0, time.UTC)
	n := &fleetv1alpha1.MacNode{}
	for i := 0; i < HistoryLimit; i++ {
		n.Status.History = append(n.Status.History, fleetv1alpha1.LeaseRecord{LeaseName: fmt.Sprint(i)})
	}
	n.Status.Binding = &fleetv1alpha1.Binding{LeaseNamespace: "t", LeaseName: "l", LeaseUID: "u", BoundAt: metav1.NewTime(now.Add(-25 * time.Hour))}
	n.Status.Slots = []fleetv1alpha1.Slot{{Namespace: "t", Name: "ci-1", UID: "i"}}
	n.Status.Phase = fleetv1alpha1.MacNodeLeased

	got := Freed(n, now)
	if got.Status.Binding != nil {
		t.Fatalf("binding not cleared: %+v", got.Status)
	}
	// One writer per field: the slots are placement's, the phase the node
	// controller's; Freed, the lease controller's write, leaves both.
	if len(got.Status.Slots) != 1 || got.Status.Phase != fleetv1alpha1.MacNodeLeased {
		t.Fatalf("Freed wrote another controller's field: slots %+v, phase %s", got.Status.Slots, got.Status.Phase)
	}
	if len(got.Status.History) != HistoryLimit {
		t.Fatalf("history is %d long, want the limit %d", len(got.Status.History), HistoryLimit)
	}
	last := got.Status.History[HistoryLimit-1]
	if last.LeaseName != "l" || !last.ReleasedAt.Time.Equal(now) || got.Status.History[0].LeaseName != "1" {
		t.Fatalf("want the oldest record dropped and the lease appended, got first %q last %+v", got.Status.History[0].LeaseName, last)
	}
	if n.Status.Binding == nil {
		t.Fatal("the input was modified")
	}
}

func TestOnlyInstancesAwaitingTheirWipeHoldTheChassis(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{computev1alpha1.AddToScheme, fleetv1alpha1.AddToScheme, leasingv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	inst := func(name string, finalizers ...string) *computev1alpha1.MacOSInstance {
		return &computev1alpha1.MacOSInstance{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "t", Finalizers: finalizers},
			Spec:       computev1alpha1.MacOSInstanceSpec{LeaseName: "l"},
		}
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		inst("running", fleetv1alpha1.DiskWipeFinalizer),
		inst("running-and-kept", fleetv1alpha1.DiskWipeFinalizer, "example.com/keep"),
		inst("wiped-but-kept", "example.com/keep"),
	)
	for _, ix := range index.Definitions() {
		b = b.WithIndex(ix.Object, ix.Name, ix.Value)
	}
	c := b.Build()
	awaiting, err := DeleteInstances(context.Background(), c, "t", "l")
	if err != nil {
		t.Fatal(err)
	}
	if awaiting != 2 {
		t.Fatalf("want the two instances that still carry %s to hold the chassis, got %d", fleetv1alpha1.DiskWipeFinalizer, awaiting)
	}
	kept := &computev1alpha1.MacOSInstance{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "t", Name: "wiped-but-kept"}, kept); err != nil || kept.DeletionTimestamp.IsZero() {
		t.Fatalf("the wiped instance is deleted all the same, its tenant's finalizer aside: %v %v", err, kept.DeletionTimestamp)
	}
}

func newClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{computev1alpha1.AddToScheme, fleetv1alpha1.AddToScheme, leasingv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&fleetv1alpha1.MacNode{})
	for _, ix := range index.Definitions() {
		b = b.WithIndex(ix.Object, ix.Name, ix.Value)
	}
	return b.Build()
}

func leasedNode(inv *fleetv1alpha1.HostInventory) *fleetv1alpha1.MacNode {
	n := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: "c02t00000009"},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02T00000009", NodeClassName: "m4"}}
	n.Status.Phase = fleetv1alpha1.MacNodeLeased
	n.Status.Binding = &fleetv1alpha1.Binding{LeaseNamespace: "t", LeaseName: "l", LeaseUID: "u"}
	n.Status.Reported = &fleetv1alpha1.ReportedFacts{Inventory: inv}
	return n
}

func TestHoldsSaysWhatTheAgentReports(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 6, 2, 13, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name string
		inv  *fleetv1alpha1.HostInventory
		want []string
	}{
		{"never reported", nil, []string{"the agent of chassis C02T00000009 has not reported what it holds"}},
		{"reported empty", &fleetv1alpha1.HostInventory{ObservedAt: at}, nil},
		{"a VM and two disks", &fleetv1alpha1.HostInventory{ObservedAt: at,
			VMs: []fleetv1alpha1.HostVM{{UID: "vm-1", State: "Running"}}, Disks: []types.UID{"vm-1", "old-2"}},
			[]string{"chassis C02T00000009 still holds 1 VM(s): vm-1 (Running) and 2 instance disk(s): vm-1, old-2", "2026-06-02T13:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Holds(leasedNode(tc.inv))
			if tc.want == nil && got != "" {
				t.Fatalf("an empty chassis holds %q", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("Holds = %q, want it to say %q", got, w)
				}
			}
		})
	}
}

func TestReleaseFreesOnlyAChassisItsAgentReportsEmpty(t *testing.T) {
	now := time.Date(2026, 6, 3, 13, 0, 0, 0, time.UTC)
	full := &fleetv1alpha1.HostInventory{ObservedAt: metav1.NewTime(now), Disks: []types.UID{"old"}}
	for _, tc := range []struct {
		name      string
		node      *fleetv1alpha1.MacNode
		freed     bool
		wantPhase fleetv1alpha1.MacNodePhase
	}{
		{"a chassis that still holds a disk", leasedNode(full), false, fleetv1alpha1.MacNodeLeased},
		{"a chassis whose agent never reported", leasedNode(nil), false, fleetv1alpha1.MacNodeLeased},
		{"an empty chassis whose slot placement has yet to free", func() *fleetv1alpha1.MacNode {
			n := leasedNode(&fleetv1alpha1.HostInventory{ObservedAt: metav1.NewTime(now)})
			n.Status.Slots = []fleetv1alpha1.Slot{{Namespace: "t", Name: "ci", UID: "gone"}}
			return n
		}(), false, fleetv1alpha1.MacNodeLeased},
		// The phase stays: the node controller derives it from the binding.
		{"an empty chassis (the positive control)", leasedNode(&fleetv1alpha1.HostInventory{ObservedAt: metav1.NewTime(now)}), true, fleetv1alpha1.MacNodeLeased},
		{"a retired chassis, whose dead agent's report is stale", func() *fleetv1alpha1.MacNode {
			n := leasedNode(full)
			n.Spec.Retired = true
			return n
		}(), true, fleetv1alpha1.MacNodeLeased},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, tc.node)
			stored := &fleetv1alpha1.MacNode{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(tc.node), stored); err != nil {
				t.Fatal(err)
			}
			out, err := Release(context.Background(), c, stored, "t", "l", now)
			if err != nil {
				t.Fatal(err)
			}
			if (out.Freed != nil) != tc.freed {
				t.Fatalf("freed %v, want %v (holds %q)", out.Freed != nil, tc.freed, out.Holds)
			}
			if !tc.freed && out.Holds == "" && out.Slots == 0 {
				t.Fatal("kept, but neither Holds nor Slots says why")
			}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(tc.node), stored); err != nil {
				t.Fatal(err)
			}
			if (stored.Status.Binding == nil) != tc.freed || stored.Status.Phase != tc.wantPhase {
				t.Fatalf("stored binding %+v phase %s, want freed %v phase %s", stored.Status.Binding, stored.Status.Phase, tc.freed, tc.wantPhase)
			}
		})
	}
}

func TestReleaseWaitsForTheWipesBeforeTheReport(t *testing.T) {
	node := leasedNode(&fleetv1alpha1.HostInventory{})
	inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "ci", Namespace: "t", Finalizers: []string{fleetv1alpha1.DiskWipeFinalizer}},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "l"}}
	c := newClient(t, node, inst)
	out, err := Release(context.Background(), c, node, "t", "l", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if out.Freed != nil || out.AwaitingWipe != 1 {
		t.Fatalf("outcome %+v, want one instance awaiting its wipe and nothing freed", out)
	}
}
