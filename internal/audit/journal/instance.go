package journal

import (
	"strconv"
	"strings"
	"time"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// An instance's transitions are written by two parties, the placement
// controller (status.nodeName) and the chassis' agent (status.runtime), so
// no single status write carries them. The exporter observes them instead:
// the journal's observed map holds what it last recorded, and each field
// that moved since is one record. The facts it reads are sticky (a node
// name, a stop's and a wipe's timestamps), so each is recorded once; a
// phase the agent held between two observations is the one thing that can
// go unseen.
const (
	observedNode  = "node"
	observedPhase = "phase"
	observedStop  = "lastStop"
	observedWipe  = "wipe"
	// observedRun is "running" after a running record, "stopped" after a
	// stopped one: a run that ends gets its stopped record even when no
	// observation caught the VM Stopped (a deleted instance stops and is
	// wiped within moments).
	observedRun = "run"
)

// Instance appends what moved on inst since the exporter last
// looked: placed, running, stopped, wiped (with the wipe's evidence).
func Instance(inst *computev1alpha1.MacOSInstance, now time.Time) (dropped int) {
	st := &inst.Status
	seen := map[string]string{}
	if st.Audit != nil {
		seen = st.Audit.Observed
	}
	var recs []fleetv1alpha1.AuditRecord
	base := func() map[string]string {
		return map[string]string{"tenant": inst.Namespace, "lease": inst.Spec.LeaseName, "node": st.NodeName, "image": inst.Spec.ImageName}
	}
	cur := map[string]string{observedNode: st.NodeName, observedPhase: ""}
	if st.Audit == nil || st.Audit.NextSequence == 0 {
		recs = append(recs, record("created", inst.CreationTimestamp.Time, "", "", base()))
	}
	if st.NodeName != "" && seen[observedNode] != st.NodeName {
		recs = append(recs, record("placed", now, "", "", base()))
	}
	if rt := st.Runtime; rt != nil {
		// Only whether it runs: the phases before and after a run are not
		// transitions of their own, and each would cost a write.
		if rt.Phase == computev1alpha1.VMRunning {
			cur[observedPhase] = string(rt.Phase)
		}
		if rt.Phase == computev1alpha1.VMRunning && seen[observedPhase] != string(rt.Phase) {
			// Observed now: a report's time may still be the last run's.
			recs = append(recs, record("running", now, "", "", base()))
		}
		run := seen[observedRun]
		if rt.Phase == computev1alpha1.VMRunning && seen[observedPhase] != string(rt.Phase) {
			run = "running"
		}
		if s := rt.LastStop; s != nil {
			cur[observedStop] = stamp(&s.At)
			if seen[observedStop] != cur[observedStop] {
				a := base()
				a["method"] = string(s.Method)
				recs = append(recs, record("stopped", s.At.Time, string(s.Method), s.Reason, a))
				run = "stopped"
			}
		}
		if run == "running" && (rt.Phase == computev1alpha1.VMStopped || rt.Phase == computev1alpha1.VMFailed || rt.Wipe != nil) {
			reason := string(rt.Phase)
			if rt.Wipe != nil {
				reason = "Wiped"
			}
			recs = append(recs, record("stopped", now, reason, "", base()))
			run = "stopped"
		}
		cur[observedRun] = run
		if w := rt.Wipe; w != nil {
			cur[observedWipe] = stamp(&w.WipedAt)
			if seen[observedWipe] != cur[observedWipe] {
				a := base()
				a["method"], a["bytes"], a["files"] = w.Method, strconv.FormatInt(w.Bytes, 10), strings.Join(w.Files, ",")
				a["wipedAt"] = cur[observedWipe]
				recs = append(recs, record("wiped", w.WipedAt.Time, "", "", a))
			}
		}
	}
	dropped = Append(&st.Audit, recs...)
	if st.Audit != nil {
		for k, v := range cur {
			setObserved(st.Audit, k, v)
		}
	}
	return dropped
}
