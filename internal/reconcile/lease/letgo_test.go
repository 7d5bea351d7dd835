package lease

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// The lease controller takes its finalizer off a lease it is done with,
// but leaves it on a Released lease that carries the audit finalizer: the
// exporter takes both off in one write once the last records are out
// (issue 39).
func TestTheLeaseControllerLeavesItsFinalizerToTheExporterOnceReleased(t *testing.T) {
	lease, audit := fleetv1alpha1.LeaseFinalizer, fleetv1alpha1.AuditFinalizer
	for _, tc := range []struct {
		name       string
		phase      leasingv1alpha1.MacNodeLeasePhase
		finalizers []string
		want       []string
	}{
		{"a Released lease with the audit finalizer keeps its own for the exporter", leasingv1alpha1.LeaseReleased, []string{lease, audit}, []string{lease, audit}},
		{"a Released lease without the audit finalizer loses its own", leasingv1alpha1.LeaseReleased, []string{lease}, nil},
		{"a lease never bound loses its own, the audit finalizer left", leasingv1alpha1.LeasePending, []string{lease, audit}, []string{audit}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Finalizers: tc.finalizers}}
			l.Status.Phase = tc.phase
			letGo(l)
			if !slices.Equal(l.Finalizers, tc.want) {
				t.Fatalf("finalizers %v, want %v", l.Finalizers, tc.want)
			}
		})
	}
}
