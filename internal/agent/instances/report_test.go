package instances

import (
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// runtimeWrites counts the status.runtime patches the rig's agent sent.
func (rg *rig) runtimeWrites() int {
	n := 0
	for _, w := range rg.recorded() {
		if w.subresource == "status" && w.kind == "MacOSInstance" && strings.Contains(string(w.body), `"runtime"`) {
			n++
		}
	}
	return n
}

// A running VM's guest answers every poll with the same report: that is no
// write, until lastReportAt is guestReportRefresh old (issue 17: each would
// be one more write of the same values, one per instance per poll).
func TestAnUnchangedGuestReportIsNoWriteUntilItsTimeIsStale(t *testing.T) {
	rg := newQuarantineRig(t, withGuest(t), "ci-1").rig
	rg.run("ci-1")
	if rg.instance("ci-1").Status.Runtime.LastReportAt == nil {
		t.Fatal("the guest never reported")
	}
	clk := clocktesting.NewFakeClock(time.Now())
	rg.r.Clock = clk
	before := rg.runtimeWrites()
	for range 3 {
		clk.Step(10 * time.Second) // a poll's, in a Mac's agent
		if err := rg.reconcile("ci-1"); err != nil {
			t.Fatal(err)
		}
	}
	if got := rg.runtimeWrites() - before; got != 0 {
		t.Fatalf("%d runtime writes of an unchanged report, want none", got)
	}
	stamp := rg.instance("ci-1").Status.Runtime.LastReportAt
	clk.Step(guestReportRefresh - 30*time.Second)
	if err := rg.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	rt := rg.instance("ci-1").Status.Runtime
	if got := rg.runtimeWrites() - before; got != 1 || !rt.LastReportAt.After(stamp.Time) {
		t.Fatalf("after %s: %d runtime writes, lastReportAt %s (was %s); want one write with a later lastReportAt", guestReportRefresh, got, rt.LastReportAt, stamp)
	}
}

// A run's start is recorded by the report that first says Running, in that
// same write, and stays through the run, its stop and the reboot, until the
// next run starts (issue 39: the audit stream's running record is derived
// from it, so the exporter writes no journal of its own).
func TestARunsStartIsKeptUntilTheNextRun(t *testing.T) {
	qr := newQuarantineRig(t, withGuest(t), "ci-1")
	clk := clocktesting.NewFakeClock(time.Now())
	qr.r.Clock = clk
	qr.run("ci-1")
	first := qr.instance("ci-1").Status.Runtime.StartedAt
	if first == nil || !first.Time.Equal(clk.Now().UTC().Truncate(time.Second)) {
		t.Fatalf("startedAt %v after the VM ran, want %s", first, clk.Now())
	}
	clk.Step(guestReportRefresh)
	if err := qr.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	if got := qr.instance("ci-1").Status.Runtime.StartedAt; !got.Equal(first) {
		t.Fatalf("a later report of the same run moved startedAt from %s to %s", first, got)
	}
	qr.quarantine("boot-1")
	if err := qr.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	rt := qr.instance("ci-1").Status.Runtime
	if rt.Phase != computev1alpha1.VMStopped || !rt.StartedAt.Equal(first) {
		t.Fatalf("stopped: phase %s, startedAt %v; want Stopped with the run's start kept", rt.Phase, rt.StartedAt)
	}
	qr.requestReboot()
	qr.setStatus(func(st *fleetv1alpha1.MacNodeStatus) { st.Phase = fleetv1alpha1.MacNodeLeased })
	clk.Step(time.Hour)
	qr.run("ci-1")
	if got := qr.instance("ci-1").Status.Runtime.StartedAt; got == nil || !got.After(first.Time) {
		t.Fatalf("the second run's startedAt %v, want after the first's %s", got, first)
	}
}
