package lease

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
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
		if deleting && s.now.Before(s.node.Status.Binding.EarliestReleaseAt.Time) {
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

	switch {
	case lease.Status.Phase == leasingv1alpha1.LeaseHeld:
		conditions.Set(c, conditions.True(leasingv1alpha1.ConditionHeld, leasingv1alpha1.ReasonDeletedEarly,
			fmt.Sprintf("deleted before earliestReleaseAt %s; the chassis stays with this namespace until then", lease.Status.EarliestReleaseAt.UTC().Format(time.RFC3339))), gen, now)
	default:
		conditions.Set(c, conditions.False(leasingv1alpha1.ConditionHeld, leasingv1alpha1.ReasonNotDeleted, "the lease is not held"), gen, now)
	}

	switch {
	case s.retired:
		conditions.Set(c, conditions.True(leasingv1alpha1.ConditionReleased, leasingv1alpha1.ReasonChassisRetired,
			"the chassis is retired: it was let go without its disks wiped, as its status.unwipedDisks records"), gen, now)
	case lease.Status.Phase == leasingv1alpha1.LeaseReleased:
		conditions.Set(c, conditions.True(leasingv1alpha1.ConditionReleased, leasingv1alpha1.ReasonReleased, "the chassis went back to the pool"), gen, now)
	case s.refusal != "":
		if conditions.Set(c, conditions.False(leasingv1alpha1.ConditionReleased, leasingv1alpha1.ReasonPolicyDenied, s.refusal), gen, now) {
			r.Recorder.Eventf(lease, nil, corev1.EventTypeWarning, "ReleaseRefused", "Release", "%s", s.refusal)
		}
	case s.awaiting > 0:
		conditions.Set(c, conditions.False(leasingv1alpha1.ConditionReleased, leasingv1alpha1.ReasonAwaitingDiskWipe,
			fmt.Sprintf("%d instance(s) wait for the host agent to stop them and wipe their disks; the chassis stays out of the pool until then", s.awaiting)), gen, now)
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
	lease.Status.ObservedGeneration = gen
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
