package node

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
)

// The quarantine loop. Apple's kernel sometimes keeps a stopped VM counted
// in hv_apple_isa_vm_quota, and the next start fails with VZErrorDomain
// code 6 while fewer than vmCapacity VMs run. Only a host reboot clears it;
// MacRack never raises the quota. The loop:
//
//	detect   the agent reports the quota Stuck in its current boot
//	fence    status.quarantine begins; the phase is Quarantined, the Node
//	         tainted, new instances refused, no slot claimed
//	stop     the agent stops the VMs gracefully and reports none left
//	reboot   rebootRequestedAt; the phase is Rebooting; the agent reboots
//	reattach the agent reports another boot id (rebootedAt), then a probe
//	         VM started and stopped cleanly in it (recoveredAt)
//
// and the chassis goes back to the lease that held it, whose binding was
// never touched. Every step is decided from the API alone: status.quarantine
// and the agent's report. A restarted operator resumes where the status
// stands. More than MaxQuarantinesPerDay in 24 hours leaves the chassis
// Quarantined with NeedsAttention, for a person.

// quarantineWindow is the span over which quarantines are counted.
const quarantineWindow = 24 * time.Hour

// maxRecentQuarantines is status.recentQuarantines' schema limit.
const maxRecentQuarantines = 8

// reconcileQuarantine takes the chassis' quarantine one step further, in
// memory: the pass writes it with the rest of the status.
func (r *Reconciler) reconcileQuarantine(s *scope) {
	st := &s.node.Status
	if s.node.Spec.Retired {
		return // retirement ends the chassis' service; there is nothing to repair
	}
	now := metav1.NewTime(s.now.UTC().Truncate(time.Second))
	if quota, ok := stuckNow(st.Reported); ok && startsQuarantine(st.Quarantine, quota) {
		r.startQuarantine(s, quota, now)
		return
	}
	q := st.Quarantine
	if !q.Active() || q.NeedsAttention {
		return
	}
	rep := st.Reported
	if q.RebootRequestedAt == nil {
		if !vmsStopped(rep, q) {
			return
		}
		q.RebootRequestedAt = &now
		s.tell(corev1.EventTypeNormal, fleetv1alpha1.ReasonRebootRequested, "Reboot",
			fmt.Sprintf("The VMs of chassis %s are stopped; its host agent reboots the host to clear the stuck quota", s.node.Spec.Serial))
	}
	if q.RebootedAt == nil {
		if rep == nil || rep.BootID == "" || rep.BootID == q.BootID {
			return
		}
		q.RebootedAt = &now
		s.tell(corev1.EventTypeNormal, fleetv1alpha1.ReasonRebooted, "Reboot",
			fmt.Sprintf("Chassis %s rebooted: boot %s follows boot %s; waiting for its probe VM", s.node.Spec.Serial, rep.BootID, q.BootID))
	}
	if s.recoveryWait = notRecovered(s, rep, q); s.recoveryWait != "" {
		return
	}
	q.RecoveredAt = &now
	s.quarantineRecovered = true
	s.tell(corev1.EventTypeNormal, fleetv1alpha1.ReasonRecovered, "Recover",
		fmt.Sprintf("Chassis %s recovered: a probe VM started and stopped cleanly in boot %s, %s after the quarantine began", s.node.Spec.Serial, rep.BootID, now.Sub(q.QuarantinedAt.Time)))
}

// stuckNow returns the agent's quota report when it says Stuck for the
// host's current boot. A report of an earlier boot is stale: the reboot
// that followed it reset the counter.
func stuckNow(rep *fleetv1alpha1.ReportedFacts) (*fleetv1alpha1.QuotaReport, bool) {
	if rep == nil || rep.Quota == nil || rep.Quota.State != fleetv1alpha1.QuotaStuck {
		return nil, false
	}
	if rep.Quota.BootID != rep.BootID {
		return nil, false
	}
	return rep.Quota, true
}

// startsQuarantine reports whether a Stuck report begins a quarantine: the
// chassis is in none, or the quota stuck again in a boot after the one the
// current quarantine rebooted (its probe failed), which counts as another.
func startsQuarantine(q *fleetv1alpha1.QuarantineStatus, quota *fleetv1alpha1.QuotaReport) bool {
	switch {
	case q == nil:
		return true
	case !q.Active():
		return quota.BootID != q.BootID
	default:
		return !q.NeedsAttention && q.RebootedAt != nil && quota.BootID != q.BootID
	}
}

// startQuarantine fences the chassis, counting this quarantine among the
// recent ones.
func (r *Reconciler) startQuarantine(s *scope, quota *fleetv1alpha1.QuotaReport, now metav1.Time) {
	st := &s.node.Status
	recent := []metav1.Time{}
	for _, t := range st.RecentQuarantines {
		if now.Sub(t.Time) < quarantineWindow {
			recent = append(recent, t)
		}
	}
	recent = append(recent, now)
	inWindow := len(recent)
	if len(recent) > maxRecentQuarantines {
		recent = recent[len(recent)-maxRecentQuarantines:]
	}
	st.RecentQuarantines = recent
	st.Quarantine = &fleetv1alpha1.QuarantineStatus{
		BootID: quota.BootID, Evidence: evidence(quota, s.capacity()), QuarantinedAt: now,
		NeedsAttention: inWindow > fleetv1alpha1.MaxQuarantinesPerDay,
	}
	s.quarantineStarted = true
	holder := "it is in the pool"
	if b := st.Binding; b != nil {
		holder = fmt.Sprintf("it goes back to lease %s/%s", b.LeaseNamespace, b.LeaseName)
	}
	s.tell(corev1.EventTypeWarning, fleetv1alpha1.ReasonQuarantineStarted, "Quarantine",
		fmt.Sprintf("Quarantined chassis %s: %s. Its VMs stop gracefully, the host reboots, and %s; the quota is never raised", s.node.Spec.Serial, st.Quarantine.Evidence, holder))
	if st.Quarantine.NeedsAttention {
		s.tell(corev1.EventTypeWarning, fleetv1alpha1.ReasonTooManyQuarantines, "Quarantine",
			fmt.Sprintf("Chassis %s was quarantined %d times in 24 hours, more than %d: it is not rebooted again and never returns to the pool; a person must look", s.node.Spec.Serial, inWindow, fleetv1alpha1.MaxQuarantinesPerDay))
	}
}

// capacity is the class's VM capacity, or the kernel's limit when the
// class is unknown.
func (s *scope) capacity() int32 {
	if s.class != nil && s.class.Spec.VMCapacity > 0 {
		return min(s.class.Spec.VMCapacity, fleetv1alpha1.KernelVMLimit)
	}
	return fleetv1alpha1.KernelVMLimit
}

// evidence says what the agent saw, in the words of its report.
func evidence(q *fleetv1alpha1.QuotaReport, capacity int32) string {
	at := "an unreported time"
	if q.LastErrorAt != nil {
		at = q.LastErrorAt.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("the kernel refused a VM start with VZErrorDomain code %d at %s while %d of %d VMs ran (boot %s)",
		q.LastErrorCode, at, q.RunningVMs, capacity, q.BootID)
}

// vmsStopped reports whether the agent says, in an inventory it took
// under this quarantine's fence, that no VM is left running on the
// chassis. The inventory names the quarantine it saw, so that no clock of
// the agent's is compared with the operator's. The agent checks for itself
// again before it reboots; this only decides when to ask.
func vmsStopped(rep *fleetv1alpha1.ReportedFacts, q *fleetv1alpha1.QuarantineStatus) bool {
	if rep == nil || rep.Inventory == nil || rep.Inventory.QuarantinedAt == nil || !rep.Inventory.QuarantinedAt.Equal(&q.QuarantinedAt) {
		return false
	}
	for _, vm := range rep.Inventory.VMs {
		if vm.State != "Stopped" {
			return false
		}
	}
	return true
}

// notRecovered says what a rebooted chassis still lacks to serve again,
// or "" when nothing: a probe VM that passed in the new boot, a healthy
// quota, a heartbeat not missed, and facts that still meet the class (a host that
// came back with SIP off does not serve).
func notRecovered(s *scope, rep *fleetv1alpha1.ReportedFacts, q *fleetv1alpha1.QuarantineStatus) string {
	switch {
	case rep.Quota == nil || rep.Quota.Probe == nil || rep.Quota.Probe.BootID != rep.BootID:
		return fmt.Sprintf("the host agent's probe VM in boot %s", rep.BootID)
	case rep.Quota.Probe.Result != fleetv1alpha1.ProbePassed:
		return "a probe VM that passes; the last failed: " + rep.Quota.Probe.Message
	case rep.Quota.State != fleetv1alpha1.QuotaOK || rep.Quota.BootID != rep.BootID:
		return fmt.Sprintf("a healthy quota report in boot %s", rep.BootID)
	case s.agent == metav1.ConditionFalse:
		return "the host agent's heartbeat: " + s.agentMessage
	case len(s.problems) > 0:
		return fmt.Sprintf("facts that meet the class again: %v", s.problems)
	}
	return ""
}

// quarantineReason is the Quarantined condition's reason: the loop's step.
func quarantineReason(q *fleetv1alpha1.QuarantineStatus) string {
	switch {
	case q.NeedsAttention:
		return fleetv1alpha1.ReasonTooManyQuarantines
	case q.RebootRequestedAt == nil:
		return fleetv1alpha1.ReasonStoppingVMs
	case q.RebootedAt == nil:
		return fleetv1alpha1.ReasonRebootRequested
	}
	return fleetv1alpha1.ReasonRebooted
}

// quarantineMessage says, for a person or a tenant, where the loop stands
// and why.
func quarantineMessage(st *fleetv1alpha1.MacNodeStatus) string {
	q := st.Quarantine
	if !q.Active() {
		return "the chassis is not quarantined"
	}
	switch quarantineReason(q) {
	case fleetv1alpha1.ReasonTooManyQuarantines:
		return fmt.Sprintf("the kernel VM quota stuck more than %d times in 24 hours (%s): MacRack does not reboot the host again; the chassis stays fenced, and out of the pool, until a person acts",
			fleetv1alpha1.MaxQuarantinesPerDay, q.Evidence)
	case fleetv1alpha1.ReasonStoppingVMs:
		return fmt.Sprintf("the kernel VM quota stuck (%s); new instances are refused, and the host agent stops the VMs gracefully before a reboot", q.Evidence)
	case fleetv1alpha1.ReasonRebootRequested:
		return fmt.Sprintf("the VMs are stopped; the host reboots to clear the stuck kernel VM quota (asked at %s)", q.RebootRequestedAt.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("the host rebooted at %s to clear the stuck kernel VM quota; it serves again after a probe VM passes", q.RebootedAt.UTC().Format(time.RFC3339))
}

// setQuarantineConditions sets QuotaHealthy, Quarantined and
// NeedsAttention.
func (r *Reconciler) setQuarantineConditions(s *scope) {
	st := &s.node.Status
	c, gen := &st.Conditions, s.node.Generation
	switch quota, ok := stuckNow(st.Reported); {
	case ok:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionQuotaHealthy, fleetv1alpha1.ReasonQuotaStuck, evidence(quota, s.capacity())), gen, s.now)
	case st.Reported == nil || st.Reported.Quota == nil:
		conditions.Set(c, conditions.Unknown(fleetv1alpha1.ConditionQuotaHealthy, fleetv1alpha1.ReasonNotReported, "the host agent has not reported the quota"), gen, s.now)
	default:
		conditions.Set(c, conditions.True(fleetv1alpha1.ConditionQuotaHealthy, fleetv1alpha1.ReasonQuotaOK, "the kernel VM quota is not stuck in the host's current boot"), gen, s.now)
	}

	q := st.Quarantine
	switch {
	case q.Active():
		msg := quarantineMessage(st)
		if s.recoveryWait != "" {
			msg += "; waiting for " + s.recoveryWait
		}
		conditions.Set(c, conditions.True(fleetv1alpha1.ConditionQuarantined, quarantineReason(q), msg), gen, s.now)
	case q != nil:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionQuarantined, fleetv1alpha1.ReasonRecovered,
			fmt.Sprintf("recovered at %s from the quarantine of %s", q.RecoveredAt.UTC().Format(time.RFC3339), q.QuarantinedAt.UTC().Format(time.RFC3339))), gen, s.now)
	default:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionQuarantined, fleetv1alpha1.ReasonQuotaOK, "the chassis was never quarantined"), gen, s.now)
	}

	if q.Active() && q.NeedsAttention {
		conditions.Set(c, conditions.True(fleetv1alpha1.ConditionNeedsAttention, fleetv1alpha1.ReasonTooManyQuarantines, quarantineMessage(st)), gen, s.now)
	} else {
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionNeedsAttention, "WithinLimit",
			fmt.Sprintf("%d quarantines recorded; up to %d in 24 hours are repaired by a reboot", len(st.RecentQuarantines), fleetv1alpha1.MaxQuarantinesPerDay)), gen, s.now)
	}
}
