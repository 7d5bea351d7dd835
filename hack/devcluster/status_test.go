package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

func TestTheStatusLineCountsThePhasesItNames(t *testing.T) {
	node := func(p fleetv1alpha1.MacNodePhase) fleetv1alpha1.MacNode {
		n := fleetv1alpha1.MacNode{}
		n.Status.Phase = p
		return n
	}
	lease := func(p leasingv1alpha1.MacNodeLeasePhase) leasingv1alpha1.MacNodeLease {
		l := leasingv1alpha1.MacNodeLease{}
		l.Status.Phase = p
		return l
	}
	inst := func(p computev1alpha1.VMPhase) computev1alpha1.MacOSInstance {
		i := computev1alpha1.MacOSInstance{}
		if p != "" {
			i.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: p}
		}
		return i
	}
	s := summarize(
		[]fleetv1alpha1.MacNode{node(fleetv1alpha1.MacNodeReady), node(fleetv1alpha1.MacNodeReady), node(fleetv1alpha1.MacNodeLeased),
			node(fleetv1alpha1.MacNodeQuarantined), node(fleetv1alpha1.MacNodeRebooting)},
		[]leasingv1alpha1.MacNodeLease{lease(leasingv1alpha1.LeaseBound), lease(leasingv1alpha1.LeaseHeld), lease(leasingv1alpha1.LeasePending)},
		[]computev1alpha1.MacOSInstance{inst(computev1alpha1.VMRunning), inst(computev1alpha1.VMPulling), inst("")},
	)
	s.backlog = 3
	want := "chassis 2 Ready, 1 Leased, 1 Quarantined | leases 1 Bound, 1 Held | instances 1 Running | audit backlog 3"
	if got := s.String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	s.backlog = -1
	if got := s.String(); !strings.HasSuffix(got, "audit backlog ?") {
		t.Errorf("an unanswered metrics endpoint shows as %q", got)
	}
}

func TestTheAuditBacklogSumsItsSources(t *testing.T) {
	metrics := `# HELP macrack_audit_backlog_records Audit records waiting for the sink.
# TYPE macrack_audit_backlog_records gauge
macrack_audit_backlog_records{source="denials"} 2
macrack_audit_backlog_records{source="journals"} 5
macrack_audit_backlog_records_other 100
macrack_leases{phase="Bound"} 1
`
	if got, ok := auditBacklog(strings.NewReader(metrics)); !ok || got != 7 {
		t.Errorf("got %v %v, want 7: the two sources, and not a metric whose name only starts like the backlog's", got, ok)
	}
	if _, ok := auditBacklog(strings.NewReader("macrack_leases{phase=\"Bound\"} 1\n")); ok {
		t.Error("a missing backlog metric reads as known")
	}
}

func TestOnlyErrorsNeedAPerson(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       string
	}{
		{"an error shows, with its error", `{"level":"error","ts":"2026-12-06T20:00:01.000Z","msg":"Reaping failed","error":"disk busy"}`, "ERROR agent C02SIM000001: Reaping failed: disk busy"},
		{"an info line stays in the file", `{"level":"info","ts":"2026-12-06T20:00:01.000Z","msg":"Lease bound"}`, ""},
		{"a debug line stays in the file", `{"level":"debug","ts":"2026-12-06T20:00:01.000Z","msg":"Lost an optimistic-concurrency race; retrying"}`, ""},
		{"a line that is not JSON stays in the file", `I1206 20:00:01.000000 1 main.go:1] error`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := needsAPerson("agent C02SIM000001", []byte(tc.line))
			if ok != (tc.want != "") || !strings.HasSuffix(got, tc.want) {
				t.Errorf("got %q %v, want %q", got, ok, tc.want)
			}
		})
	}
}

func TestThePlainStatusLinePrintsChangesAndOnceAMinute(t *testing.T) {
	var out bytes.Buffer
	term := &terminal{out: &out}
	t0 := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	term.status("a", t0)
	term.status("a", t0.Add(2*time.Second))
	term.status("b", t0.Add(4*time.Second))
	term.status("b", t0.Add(4*time.Second+plainEvery))
	term.alert("ERROR operator: x")
	if got, want := out.String(), "20:00:00 a\n20:00:04 b\n20:01:04 b\nERROR operator: x\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if strings.Contains(out.String(), "\r") || strings.Contains(out.String(), "\x1b") {
		t.Error("a plain line has terminal escapes")
	}
}

func TestTheTTYStatusLineRedrawsInPlaceUnderItsAlerts(t *testing.T) {
	var out bytes.Buffer
	term := &terminal{out: &out, tty: true, width: 20}
	now := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	term.status("chassis 4 Ready | leases 0 Bound", now)
	term.alert("ERROR operator: x")
	term.done()
	want := clear + "20:00:00 chassis 4 " + clear + "ERROR operator: x\n" + "20:00:00 chassis 4 " + "\n"
	if got := out.String(); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestReadLinesKeepsAnUnfinishedLineForLater(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.log")
	if err := os.WriteFile(path, []byte("one\ntw"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	each := func(b []byte) { got = append(got, string(b)) }
	off, partial := readLines(path, 0, nil, each)
	appendTo(t, path, "o\nthree\n")
	off, partial = readLines(path, off, partial, each)
	if strings.Join(got, ",") != "one,two,three" || len(partial) != 0 || off != int64(len("one\ntwo\nthree\n")) {
		t.Errorf("got %v, partial %q, offset %d", got, partial, off)
	}
}
