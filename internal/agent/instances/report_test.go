package instances

import (
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
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
