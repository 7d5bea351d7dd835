package chassis

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// A wipe is on record only with wipedAt; an instance awaits its wipe while
// it carries the agent's finalizer without one. The exporter may keep that
// finalizer on a wiped instance a while (issue 39): it awaits nothing then.
func TestWipedAndAwaitsWipeReadWipedAtAndTheFinalizer(t *testing.T) {
	at := metav1.Now()
	for _, c := range []struct {
		name         string
		runtime      *computev1alpha1.RuntimeStatus
		finalizers   []string
		wiped, waits bool
	}{
		{name: "no runtime, no finalizer"},
		{name: "no runtime, the agent's finalizer", finalizers: []string{fleetv1alpha1.DiskWipeFinalizer}, waits: true},
		{name: "stopped, not wiped, the agent's finalizer", runtime: &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMStopped},
			finalizers: []string{fleetv1alpha1.DiskWipeFinalizer, fleetv1alpha1.AuditFinalizer}, waits: true},
		{name: "wiped, the finalizer left to the exporter", runtime: &computev1alpha1.RuntimeStatus{WipedAt: &at},
			finalizers: []string{fleetv1alpha1.DiskWipeFinalizer, fleetv1alpha1.AuditFinalizer}, wiped: true},
		{name: "wiped, the finalizer gone", runtime: &computev1alpha1.RuntimeStatus{WipedAt: &at}, wiped: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Finalizers: c.finalizers}}
			inst.Status.Runtime = c.runtime
			if got := Wiped(inst); got != c.wiped {
				t.Errorf("Wiped = %v, want %v", got, c.wiped)
			}
			if got := AwaitsWipe(inst); got != c.waits {
				t.Errorf("AwaitsWipe = %v, want %v", got, c.waits)
			}
		})
	}
}
