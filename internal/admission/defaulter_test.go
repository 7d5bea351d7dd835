package admission

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

const tenantFinalizer = "example.com/tenant-own"

func TestTheLeaseDefaulterGivesTheOperatorsFinalizersOnce(t *testing.T) {
	deleting := metav1.Now()
	for _, c := range []struct {
		name     string
		given    []string
		deleting bool
		want     []string
	}{
		{name: "a lease with no finalizers gets the lease's and the audit's",
			want: []string{fleetv1alpha1.LeaseFinalizer, fleetv1alpha1.AuditFinalizer}},
		{name: "a lease that lists both already keeps them, in its order",
			given: []string{fleetv1alpha1.AuditFinalizer, fleetv1alpha1.LeaseFinalizer},
			want:  []string{fleetv1alpha1.AuditFinalizer, fleetv1alpha1.LeaseFinalizer}},
		{name: "a lease that lists one gets the other, not a second copy",
			given: []string{fleetv1alpha1.AuditFinalizer},
			want:  []string{fleetv1alpha1.AuditFinalizer, fleetv1alpha1.LeaseFinalizer}},
		{name: "a tenant's own finalizer stays, and the operator's are added after it",
			given: []string{tenantFinalizer},
			want:  []string{tenantFinalizer, fleetv1alpha1.LeaseFinalizer, fleetv1alpha1.AuditFinalizer}},
		{name: "a lease being deleted is left as it is: its finalizers may no longer grow",
			given: []string{tenantFinalizer}, deleting: true,
			want: []string{tenantFinalizer}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Finalizers: slices.Clone(c.given)}}
			if c.deleting {
				l.DeletionTimestamp = &deleting
			}
			d := Finalizers(true, true).Lease
			if err := d.Default(context.Background(), l); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(l.Finalizers, c.want) {
				t.Fatalf("finalizers %v, want %v", l.Finalizers, c.want)
			}
			// Idempotent: the API server may call a mutating webhook again
			// (reinvocation), and a second pass must change nothing.
			if err := d.Default(context.Background(), l); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(l.Finalizers, c.want) {
				t.Fatalf("a second pass made %v, want %v", l.Finalizers, c.want)
			}
		})
	}
}

func TestTheInstanceDefaulterGivesTheAuditFinalizerAlone(t *testing.T) {
	deleting := metav1.Now()
	for _, c := range []struct {
		name     string
		given    []string
		deleting bool
		want     []string
	}{
		{name: "an instance with no finalizers gets the audit's, not the agent's disk-wipe",
			want: []string{fleetv1alpha1.AuditFinalizer}},
		{name: "an instance that lists it already keeps one copy",
			given: []string{fleetv1alpha1.AuditFinalizer},
			want:  []string{fleetv1alpha1.AuditFinalizer}},
		{name: "a tenant's own finalizers stay, the disk-wipe one included, and the audit's is added",
			given: []string{fleetv1alpha1.DiskWipeFinalizer, tenantFinalizer},
			want:  []string{fleetv1alpha1.DiskWipeFinalizer, tenantFinalizer, fleetv1alpha1.AuditFinalizer}},
		{name: "an instance being deleted is left as it is",
			deleting: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			i := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Finalizers: slices.Clone(c.given)}}
			if c.deleting {
				i.DeletionTimestamp = &deleting
			}
			for range 2 { // idempotent, as above
				if err := Finalizers(true, true).Instance.Default(context.Background(), i); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(i.Finalizers, c.want) {
					t.Fatalf("finalizers %v, want %v", i.Finalizers, c.want)
				}
			}
		})
	}
}

func TestTheDefaultersGiveOnlyTheFinalizersOfWhatRuns(t *testing.T) {
	for _, c := range []struct {
		name                    string
		controllers, exported   bool
		wantLease, wantInstance []string
	}{
		{name: "the controllers and the exporter: the lease's and the audit's",
			controllers: true, exported: true,
			wantLease:    []string{fleetv1alpha1.LeaseFinalizer, fleetv1alpha1.AuditFinalizer},
			wantInstance: []string{fleetv1alpha1.AuditFinalizer}},
		{name: "no exporter: no audit finalizer, which nobody would take off",
			controllers: true, wantLease: []string{fleetv1alpha1.LeaseFinalizer}},
		{name: "webhooks alone: none", exported: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Finalizers(c.controllers, c.exported)
			l := &leasingv1alpha1.MacNodeLease{}
			i := &computev1alpha1.MacOSInstance{}
			if err := d.Lease.Default(context.Background(), l); err != nil {
				t.Fatal(err)
			}
			if err := d.Instance.Default(context.Background(), i); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(l.Finalizers, c.wantLease) || !slices.Equal(i.Finalizers, c.wantInstance) {
				t.Fatalf("lease %v, instance %v; want %v, %v", l.Finalizers, i.Finalizers, c.wantLease, c.wantInstance)
			}
		})
	}
}
