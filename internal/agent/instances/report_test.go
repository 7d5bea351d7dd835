package instances

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	clocktesting "k8s.io/utils/clock/testing"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/simguest"
	"github.com/boualleiguie/macrack-operator/internal/guest"
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

// headroomGuest is a sim guest whose disk headroom a test changes.
type headroomGuest struct{ headroom atomic.Int64 }

func (g *headroomGuest) Report(ctx context.Context) (guest.Report, error) {
	return simguest.Reporter{XcodeVersions: []string{"16.4"}, HeadroomBytes: g.headroom.Load(), Clock: clock.RealClock{}}.Report(ctx)
}

// A running VM's guest answers every poll with the same report: that is no
// write, until lastReportAt is guestReportRefresh (an hour) old (issue 17:
// each would be one more write of the same values, one per instance per
// poll; issue 39: at a minute, the refresh was most of what a long wave
// wrote beyond the heartbeats). A changed report is written at once.
func TestAnUnchangedGuestReportIsNoWriteUntilItsTimeIsStale(t *testing.T) {
	g := &headroomGuest{}
	g.headroom.Store(50 << 30)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rg := newQuarantineRig(t, []sim.Option{sim.WithGuestHandler(simguest.Handler(ctx, g, logr.Discard()))}, "ci-1").rig
	clk := clocktesting.NewFakeClock(time.Now())
	rg.r.Clock = clk
	rg.run("ci-1")
	if rg.instance("ci-1").Status.Runtime.LastReportAt == nil {
		t.Fatal("the guest never reported")
	}
	poll := func(d time.Duration) {
		t.Helper()
		clk.Step(d)
		if err := rg.reconcile("ci-1"); err != nil {
			t.Fatal(err)
		}
	}
	before := rg.runtimeWrites()
	for range 59 {
		poll(time.Minute)
	}
	if got := rg.runtimeWrites() - before; got != 0 {
		t.Fatalf("%d runtime writes of an unchanged report over 59 minutes, want none", got)
	}
	// Positive control: a changed report is written on the next poll.
	g.headroom.Store(40 << 30)
	poll(10 * time.Second)
	rt := rg.instance("ci-1").Status.Runtime
	if got := rg.runtimeWrites() - before; got != 1 || rt.DiskHeadroom.Value() != 40<<30 {
		t.Fatalf("a changed report: %d runtime writes, headroom %s; want one write of 40Gi", got, rt.DiskHeadroom)
	}
	stamp := rt.LastReportAt
	if !stamp.Time.Equal(clk.Now().Truncate(time.Second)) {
		t.Fatalf("lastReportAt %s after the change, want now (%s)", stamp, clk.Now())
	}
	for range 59 {
		poll(time.Minute)
	}
	if got := rg.runtimeWrites() - before; got != 1 {
		t.Fatalf("%d runtime writes, want the change's alone", got)
	}
	poll(time.Minute)
	rt = rg.instance("ci-1").Status.Runtime
	if got := rg.runtimeWrites() - before; got != 2 || !rt.LastReportAt.After(stamp.Time) {
		t.Fatalf("after %s: %d runtime writes, lastReportAt %s (was %s); want the refresh, with a later lastReportAt", guestReportRefresh, got, rt.LastReportAt, stamp)
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
