package journal

import (
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// Instance derives an instance's audit records from the facts its owners
// already keep in its status, rather than from a journal of its own
// (issue 39: a journal the exporter wrote cost one status write per
// transition). Each fact is sticky and carries its own time:
//   - created: metadata.creationTimestamp;
//   - placed: status.nodeName, at the Placed condition's
//     lastTransitionTime (placement sets both in one write, and never
//     unplaces);
//   - running: status.runtime.startedAt, the current or last run's start,
//     kept by the agent until the next run starts;
//   - stopped: status.runtime.lastStop, kept until the next stop; a last
//     run with no stop on record after its start, once wiped, is stopped
//     at the wipe;
//   - wiped: status.runtime.wipe, the evidence.
//
// Every record is a pure function of its fact: the same status, or any
// later one that still holds the fact, derives it again with the same
// time, reason, message and attributes, so the exporter can publish it
// under an id made of the instance's UID, its type and its time, and a
// sink that stores each id once (JetStream) stores it once whoever
// derives it again. A run overwritten by the next before any exporter saw
// it (a stop and a restart within one leader gap) is not derived: the
// exporter keeps in memory what it derived and has not published.
// The records come in the order of their facts.
func Instance(inst *computev1alpha1.MacOSInstance) []fleetv1alpha1.AuditRecord {
	st := &inst.Status
	base := func(node string) map[string]string {
		return map[string]string{"tenant": inst.Namespace, "lease": inst.Spec.LeaseName, "node": node, "image": inst.Spec.ImageName}
	}
	// created names no node: the record must read the same before its
	// placement and after.
	recs := []fleetv1alpha1.AuditRecord{record("created", inst.CreationTimestamp.Time, "", "", base(""))}
	if c := meta.FindStatusCondition(st.Conditions, computev1alpha1.ConditionPlaced); st.NodeName != "" && c != nil && c.Status == "True" {
		recs = append(recs, record("placed", c.LastTransitionTime.Time, "", "", base(st.NodeName)))
	}
	rt := st.Runtime
	if rt == nil {
		return recs
	}
	if rt.StartedAt != nil {
		recs = append(recs, record("running", rt.StartedAt.Time, "", "", base(st.NodeName)))
	}
	stoppedAfterStart := false
	if s := rt.LastStop; s != nil {
		a := base(st.NodeName)
		a["method"] = string(s.Method)
		recs = append(recs, record("stopped", s.At.Time, string(s.Method), s.Reason, a))
		stoppedAfterStart = rt.StartedAt == nil || !s.At.Before(rt.StartedAt)
	}
	if w := rt.Wipe; w != nil {
		if rt.StartedAt != nil && !stoppedAfterStart {
			// The run ended with no stop of the agent's on record (the
			// guest shut itself down, or the VM failed): it was over by
			// the wipe, the last fact of the instance.
			recs = append(recs, record("stopped", w.WipedAt.Time, "Wiped", "", base(st.NodeName)))
		}
		a := base(st.NodeName)
		a["method"], a["bytes"], a["files"] = w.Method, strconv.FormatInt(w.Bytes, 10), strings.Join(w.Files, ",")
		a["wipedAt"] = stamp(&w.WipedAt)
		recs = append(recs, record("wiped", w.WipedAt.Time, "", "", a))
	}
	sortByTime(recs)
	return recs
}

// sortByTime orders records by their facts' times, derivation order within
// a second.
func sortByTime(recs []fleetv1alpha1.AuditRecord) {
	slices.SortStableFunc(recs, func(a, b fleetv1alpha1.AuditRecord) int { return a.Time.Time.Compare(b.Time.Time) })
}
