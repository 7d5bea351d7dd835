package lease

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
)

// updateStatus computes the lease's phase and conditions from what this
// pass observed. Every condition the controller owns is set on every pass.
func (r *Reconciler) updateStatus(s *scope) {
	lease := s.lease
	now := metav1.NewTime(s.now)
	gen := lease.Generation
	deleting := !lease.DeletionTimestamp.IsZero()

	switch {
	case s.released:
		// Phase and releasedAt were written by release.
	case s.node != nil:
		fillBound(lease, s.node)
		// Held from a delete before earliestReleaseAt until Released: the
		// release after it is not a second binding.
		if deleting && (s.now.Before(s.node.Status.Binding.EarliestReleaseAt.Time) || lease.Status.HeldAt != nil) {
			lease.Status.Phase = leasingv1alpha1.LeaseHeld
		}
	case lease.Status.BoundAt != nil && deleting:
		// The binding is gone but the lease is still here: it was released.
		lease.Status.Phase = leasingv1alpha1.LeaseReleased
	default:
		lease.Status.Phase = leasingv1alpha1.LeasePending
	}

	c := &lease.Status.Conditions
	switch {
	case s.node != nil:
		b := s.node.Status.Binding
		conditions.Set(c, conditions.True(leasingv1alpha1.ConditionBound, leasingv1alpha1.ReasonBound,
			fmt.Sprintf("chassis %s (%s) is this namespace's until at least %s", s.node.Spec.Serial, s.node.Name, b.EarliestReleaseAt.UTC().Format(time.RFC3339))), gen, now)
	case lease.Status.Phase == leasingv1alpha1.LeaseReleased:
		conditions.Set(c, conditions.False(leasingv1alpha1.ConditionBound, leasingv1alpha1.ReasonReleased, "the chassis went back to the pool"), gen, now)
	case s.pendingReason != "":
		if conditions.Set(c, conditions.False(leasingv1alpha1.ConditionBound, s.pendingReason, s.pendingMessage), gen, now) {
			r.Recorder.Eventf(lease, nil, corev1.EventTypeWarning, s.pendingReason, "Bind", "%s", s.pendingMessage)
		}
	case deleting:
		conditions.Set(c, conditions.False(leasingv1alpha1.ConditionBound, leasingv1alpha1.ReasonNotBound,
			"deleted before it bound a chassis; nothing to release"), gen, now)
	default:
		conditions.Set(c, conditions.False(leasingv1alpha1.ConditionBound, leasingv1alpha1.ReasonNotBound,
			"waiting for a chassis of class "+lease.Spec.NodeClassName), gen, now)
	}

	if lease.Status.Phase == leasingv1alpha1.LeaseHeld {
		conditions.Set(c, conditions.True(leasingv1alpha1.ConditionHeld, leasingv1alpha1.ReasonDeletedEarly, heldMessage(lease, s.now)), gen, now)
	} else {
		conditions.Set(c, conditions.False(leasingv1alpha1.ConditionHeld, leasingv1alpha1.ReasonNotDeleted, "the lease is not held"), gen, now)
	}

	switch {
	case s.retired:
		conditions.Set(c, conditions.True(leasingv1alpha1.ConditionReleased, leasingv1alpha1.ReasonChassisRetired,
			"the chassis is retired: it was let go without its disks wiped, as its status.unwipedDisks records"), gen, now)
	case lease.Status.Phase == leasingv1alpha1.LeaseReleased:
		conditions.Set(c, conditions.True(leasingv1alpha1.ConditionReleased, leasingv1alpha1.ReasonReleased, "the chassis went back to the pool"), gen, now)
	case s.awaitingRecovery:
		conditions.Set(c, conditions.False(leasingv1alpha1.ConditionReleased, leasingv1alpha1.ReasonChassisQuarantined,
			fmt.Sprintf("earliestReleaseAt has passed; the release proceeds once chassis %s is back from its quarantine", s.node.Spec.Serial)), gen, now)
	case s.refusal != "":
		if conditions.Set(c, conditions.False(leasingv1alpha1.ConditionReleased, leasingv1alpha1.ReasonPolicyDenied, s.refusal), gen, now) {
			r.Recorder.Eventf(lease, nil, corev1.EventTypeWarning, "ReleaseRefused", "Release", "%s", s.refusal)
		}
	case s.awaiting > 0:
		conditions.Set(c, conditions.False(leasingv1alpha1.ConditionReleased, leasingv1alpha1.ReasonAwaitingDiskWipe,
			fmt.Sprintf("%d instance(s) wait for the host agent to stop them and wipe their disks; the chassis stays out of the pool until then", s.awaiting)), gen, now)
	case s.slots > 0:
		// Transient: placement frees the slot of a wiped instance at once.
		conditions.Set(c, conditions.False(leasingv1alpha1.ConditionReleased, leasingv1alpha1.ReasonAwaitingRelease,
			fmt.Sprintf("the instances are wiped; the chassis returns to the pool once placement frees their %d slot(s)", s.slots)), gen, now)
	case s.holds != "":
		if conditions.Set(c, conditions.False(leasingv1alpha1.ConditionReleased, leasingv1alpha1.ReasonChassisNotEmpty,
			s.holds+"; the instances are wiped, and the chassis returns to the pool once its agent reports it empty"), gen, now) {
			r.Recorder.Eventf(lease, nil, corev1.EventTypeWarning, leasingv1alpha1.ReasonChassisNotEmpty, "Release", "%s", s.holds)
		}
	case deleting && s.node != nil:
		conditions.Set(c, conditions.False(leasingv1alpha1.ConditionReleased, leasingv1alpha1.ReasonAwaitingRelease, "released at or after earliestReleaseAt"), gen, now)
	default:
		conditions.Set(c, conditions.False(leasingv1alpha1.ConditionReleased, leasingv1alpha1.ReasonNotDeleted, "the lease is not being deleted"), gen, now)
	}
	if len(lease.Spec.Images) > 0 {
		conditions.Set(c, imagesReady(lease, s.node), gen, now)
	}
	r.setChassisAvailable(s, gen, now)
	// Recorded exists only once a status write was refused: this write,
	// if it goes through, says the records are flowing again.
	if meta.FindStatusCondition(*c, leasingv1alpha1.ConditionRecorded) != nil {
		conditions.Set(c, conditions.True(leasingv1alpha1.ConditionRecorded, leasingv1alpha1.ReasonRecorded,
			"the operator's status writes go through"), gen, now)
	}
}

// setChassisAvailable tells the tenant whether its chassis serves it, and,
// with an Event, when that changes: a quarantine is an outage the tenant
// sees, with what happens and why. Each step of the outage is an Event of
// its own (quarantined, rebooting, needs attention, recovered): the steps
// between the first and the last change the reason, not the status.
func (r *Reconciler) setChassisAvailable(s *scope, gen int64, now metav1.Time) {
	lease := s.lease
	c := &lease.Status.Conditions
	was := conditions.IsTrue(*c, leasingv1alpha1.ConditionChassisAvailable)
	var wasReason string
	if prev := meta.FindStatusCondition(*c, leasingv1alpha1.ConditionChassisAvailable); prev != nil {
		wasReason = prev.Reason
	}
	cond := chassisAvailable(s.node)
	flipped := conditions.Set(c, cond, gen, now)
	if !(flipped || cond.Reason != wasReason) || s.node == nil {
		return
	}
	switch {
	case cond.Status == metav1.ConditionFalse:
		r.Recorder.Eventf(lease, s.node, corev1.EventTypeWarning, cond.Reason, "Quarantine", "%s", cond.Message)
	case !was && s.node.Status.Quarantine != nil:
		r.Recorder.Eventf(lease, s.node, corev1.EventTypeNormal, leasingv1alpha1.ReasonChassisRecovered, "Quarantine", "%s", cond.Message)
	}
}

// chassisAvailable is the ChassisAvailable condition for the bound chassis.
func chassisAvailable(node *fleetv1alpha1.MacNode) metav1.Condition {
	if node == nil {
		return conditions.False(leasingv1alpha1.ConditionChassisAvailable, leasingv1alpha1.ReasonNotBound, "no chassis is bound")
	}
	serial, q := node.Spec.Serial, node.Status.Quarantine
	switch {
	case q.Active() && q.NeedsAttention:
		return conditions.False(leasingv1alpha1.ConditionChassisAvailable, leasingv1alpha1.ReasonChassisNeedsAttention,
			fmt.Sprintf("chassis %s is unavailable: its kernel VM quota stuck more than %d times in 24 hours (a macOS fault), so MacRack stopped repairing it by reboot and a person must look; it stays with this lease and runs no VM until then",
				serial, fleetv1alpha1.MaxQuarantinesPerDay))
	case q.Active() && node.Status.Phase == fleetv1alpha1.MacNodeRebooting:
		return conditions.False(leasingv1alpha1.ConditionChassisAvailable, leasingv1alpha1.ReasonChassisRebooting,
			fmt.Sprintf("chassis %s is rebooting to clear a stuck kernel VM quota (a macOS fault); it comes back to this lease, with the same earliestReleaseAt, and your instances start again", serial))
	case q.Active():
		return conditions.False(leasingv1alpha1.ConditionChassisAvailable, leasingv1alpha1.ReasonChassisQuarantined,
			fmt.Sprintf("chassis %s is quarantined: its kernel VM quota stuck (a macOS fault that only a reboot clears); new instances are refused, your VMs are stopped gracefully, the host reboots, and it comes back to this lease with the same earliestReleaseAt", serial))
	case q != nil:
		return conditions.True(leasingv1alpha1.ConditionChassisAvailable, leasingv1alpha1.ReasonAvailable,
			fmt.Sprintf("chassis %s serves this lease; it recovered from a quarantine at %s", serial, q.RecoveredAt.UTC().Format(time.RFC3339)))
	}
	return conditions.True(leasingv1alpha1.ConditionChassisAvailable, leasingv1alpha1.ReasonAvailable, fmt.Sprintf("chassis %s serves this lease", serial))
}

// imagesReady is the ImagesReady condition of a lease that books images:
// True once every one has verified on the bound chassis, by its agent's
// report.
func imagesReady(lease *leasingv1alpha1.MacNodeLease, node *fleetv1alpha1.MacNode) metav1.Condition {
	if node == nil {
		return conditions.False(leasingv1alpha1.ConditionImagesReady, leasingv1alpha1.ReasonNotBound,
			"the images are pulled once a chassis is bound")
	}
	reported := map[string]fleetv1alpha1.ReportedImage{}
	if node.Status.Reported != nil {
		for _, i := range node.Status.Reported.Images {
			reported[i.Name] = i
		}
	}
	var failed, pulling []string
	for _, name := range lease.Spec.Images {
		i, ok := reported[name]
		switch {
		case !ok:
			pulling = append(pulling, name+" (not started; the chassis pulls only MacOSImages that exist)")
		case i.Phase == fleetv1alpha1.ImageFailed:
			failed = append(failed, name+": "+i.Message)
		case i.Phase == fleetv1alpha1.ImageReady:
		case i.BytesTotal > 0:
			pulling = append(pulling, fmt.Sprintf("%s (%s, %d%%)", name, i.Phase, i.BytesDone*100/i.BytesTotal))
		default:
			pulling = append(pulling, fmt.Sprintf("%s (%s)", name, i.Phase))
		}
	}
	switch {
	case len(failed) > 0:
		return conditions.False(leasingv1alpha1.ConditionImagesReady, leasingv1alpha1.ReasonImagesFailed, strings.Join(failed, "; "))
	case len(pulling) > 0:
		return conditions.False(leasingv1alpha1.ConditionImagesReady, leasingv1alpha1.ReasonImagesPulling,
			"chassis "+node.Spec.Serial+" is pulling "+strings.Join(pulling, ", "))
	}
	return conditions.True(leasingv1alpha1.ConditionImagesReady, leasingv1alpha1.ReasonImagesPulled,
		fmt.Sprintf("chassis %s holds a verified copy of %s", node.Spec.Serial, strings.Join(lease.Spec.Images, ", ")))
}

// heldMessage says until when a Held lease keeps its chassis, or, once that
// has passed, that the release is under way.
func heldMessage(lease *leasingv1alpha1.MacNodeLease, now time.Time) string {
	at := lease.Status.EarliestReleaseAt.UTC().Format(time.RFC3339)
	if now.Before(lease.Status.EarliestReleaseAt.Time) {
		return fmt.Sprintf("deleted before earliestReleaseAt %s; the chassis stays with this namespace until then", at)
	}
	return fmt.Sprintf("deleted before earliestReleaseAt %s, which has passed: the chassis is being released (the Released condition says how far)", at)
}
