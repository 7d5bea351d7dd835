package journal

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// TestARunThatEndsWithNoStopOnRecordIsStoppedByItsWipe: a VM the agent did
// not stop (its guest shut it down, it failed) leaves no lastStop; its run
// still ends with a stopped record, at the wipe, before the wiped record.
// A run the agent stopped gets its stop alone, and an instance that never
// ran gets none.
func TestARunThatEndsWithNoStopOnRecordIsStoppedByItsWipe(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	wipe := &fleetv1alpha1.WipeEvidence{Method: "unlink", Bytes: 4096, WipedAt: metav1.NewTime(t0.Add(time.Hour))}
	types := func(inst *computev1alpha1.MacOSInstance) []string {
		var out []string
		for _, r := range Instance(inst) {
			out = append(out, r.Type+"/"+r.Reason)
		}
		return out
	}
	inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "t", UID: "u"}}
	inst.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMFailed, StartedAt: &metav1.Time{Time: t0}, Wipe: wipe}
	if got, want := types(inst), []string{"created/", "running/", "stopped/Wiped", "wiped/"}; !slices.Equal(got, want) {
		t.Fatalf("records %v, want %v", got, want)
	}

	stopped := inst.DeepCopy()
	stopped.Status.Runtime.LastStop = &computev1alpha1.VMStop{Method: computev1alpha1.StopRequestStop, At: metav1.NewTime(t0.Add(time.Minute))}
	if got, want := types(stopped), []string{"created/", "running/", "stopped/RequestStop", "wiped/"}; !slices.Equal(got, want) {
		t.Fatalf("a run the agent stopped: records %v, want %v", got, want)
	}

	never := inst.DeepCopy()
	never.Status.Runtime.StartedAt = nil
	if got, want := types(never), []string{"created/", "wiped/"}; !slices.Equal(got, want) {
		t.Fatalf("an instance that never ran: records %v, want %v", got, want)
	}
}
