package chassis

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	if got.Status.Binding != nil || got.Status.Slots != nil || got.Status.Phase != fleetv1alpha1.MacNodeEnrolled {
		t.Fatalf("binding, slots and phase not reset: %+v", got.Status)
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
