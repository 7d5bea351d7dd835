package audit

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
)

// JournalInstance appends what moved on inst since the exporter last
// looked: placed, running, stopped, wiped (with the wipe's evidence).
func JournalInstance(inst *computev1alpha1.MacOSInstance, now time.Time) (dropped int) {
	st := &inst.Status
	seen := map[string]string{}
	if st.Audit != nil {
		seen = st.Audit.Observed
	}
	var recs []fleetv1alpha1.AuditRecord
	base := func() map[string]string {
		return map[string]string{"tenant": inst.Namespace, "lease": inst.Spec.LeaseName, "node": st.NodeName, "image": inst.Spec.ImageName}
	}
	cur := map[string]string{observedNode: st.NodeName}
	if st.Audit == nil || st.Audit.NextSequence == 0 {
		recs = append(recs, record("created", inst.CreationTimestamp.Time, "", "", base()))
	}
	if st.NodeName != "" && seen[observedNode] != st.NodeName {
		recs = append(recs, record("placed", now, "", "", base()))
	}
	if rt := st.Runtime; rt != nil {
		cur[observedPhase] = string(rt.Phase)
		if rt.Phase == computev1alpha1.VMRunning && seen[observedPhase] != string(rt.Phase) {
			// Observed now: a report's time may still be the last run's.
			recs = append(recs, record("running", now, "", "", base()))
		}
		if s := rt.LastStop; s != nil {
			cur[observedStop] = stamp(&s.At)
			if seen[observedStop] != cur[observedStop] {
				a := base()
				a["method"] = string(s.Method)
				recs = append(recs, record("stopped", s.At.Time, string(s.Method), s.Reason, a))
			}
		}
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
