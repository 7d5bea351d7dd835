package journal

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// TestARunThatEndsUnseenStillGetsItsStoppedRecord: a deleted instance's VM
// is stopped and its disk wiped within moments, and the exporter may see
// only the wipe. Its run still ends with a stopped record, before the
// wipe; an instance that never ran gets none.
func TestARunThatEndsUnseenStillGetsItsStoppedRecord(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	wipe := &fleetv1alpha1.WipeEvidence{Method: "unlink", Bytes: 4096, WipedAt: metav1.NewTime(t0.Add(time.Hour))}
	inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "t", UID: "u"}}
	inst.Status.NodeName = "c02a"
	inst.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMRunning}
	Instance(inst, t0)
	inst.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMStopped, Wipe: wipe}
	Instance(inst, t0.Add(time.Hour))
	var got []string
	for _, r := range inst.Status.Audit.Records {
		got = append(got, r.Type)
	}
	want := []string{"created", "placed", "running", "stopped", "wiped"}
	if len(got) != len(want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("records %v, want %v", got, want)
		}
	}
	Instance(inst, t0.Add(2*time.Hour))
	if n := len(inst.Status.Audit.Records); n != len(want) {
		t.Fatalf("a second look added records: %d", n)
	}

	never := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm2", Namespace: "t", UID: "u2"}}
	never.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMFailed}
	Instance(never, t0)
	for _, r := range never.Status.Audit.Records {
		if r.Type == "stopped" {
			t.Fatalf("an instance that never ran got %v", never.Status.Audit.Records)
		}
	}
}
