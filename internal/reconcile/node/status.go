package node

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
	"github.com/boualleiguie/macrack-operator/internal/phase"
)

// updateStatus sets every condition the controller owns, from the pass's
// observations and the phase derivePhase chose.
func (r *Reconciler) updateStatus(s *scope) {
	mn := s.node
	st := &mn.Status
	gen := mn.Generation
	c := &st.Conditions
	switch {
	case !s.classFound:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionHardwareCompliant, fleetv1alpha1.ReasonClassNotFound, strings.Join(s.problems, "; ")), gen, s.now)
	case len(s.unreported) > 0:
		conditions.Set(c, conditions.Unknown(fleetv1alpha1.ConditionHardwareCompliant, fleetv1alpha1.ReasonNotReported,
			"not judged yet: the host agent has not reported "+strings.Join(s.unreported, ", ")), gen, s.now)
	case len(s.problems) > 0:
		if conditions.Set(c, conditions.False(fleetv1alpha1.ConditionHardwareCompliant, fleetv1alpha1.ReasonPolicyViolation, strings.Join(s.problems, "; ")), gen, s.now) {
			s.tell(corev1.EventTypeWarning, "HardwareNotCompliant", "Assess", strings.Join(s.problems, "; "))
		}
	default:
		conditions.Set(c, conditions.True(fleetv1alpha1.ConditionHardwareCompliant, fleetv1alpha1.ReasonCompliant, "the reported facts meet the class, SIP is on, the entitlement is present"), gen, s.now)
	}

	if b := st.Binding; b != nil {
		msg := fmt.Sprintf("bound to %s/%s until at least %s", b.LeaseNamespace, b.LeaseName, b.EarliestReleaseAt.UTC().Format("2006-01-02T15:04:05Z"))
		if s.orphaned {
			msg += "; the lease is gone, the binding holds the chassis until then"
		}
		if s.holds != "" {
			msg += "; " + s.holds
		}
		conditions.Set(c, conditions.True(fleetv1alpha1.ConditionLeased, fleetv1alpha1.ReasonBound, msg), gen, s.now)
	} else {
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionLeased, fleetv1alpha1.ReasonFree, "no lease holds the chassis"), gen, s.now)
	}

	switch s.agent {
	case metav1.ConditionTrue:
		conditions.Set(c, conditions.True(fleetv1alpha1.ConditionAgentReady, fleetv1alpha1.ReasonHeartbeatCurrent, s.agentMessage), gen, s.now)
	case metav1.ConditionFalse:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionAgentReady, fleetv1alpha1.ReasonHeartbeatMissed, s.agentMessage), gen, s.now)
	default:
		conditions.Set(c, conditions.Unknown(fleetv1alpha1.ConditionAgentReady, fleetv1alpha1.ReasonNotReported, s.agentMessage), gen, s.now)
	}

	r.setQuarantineConditions(s)

	switch {
	case mn.Spec.Retired:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionReady, fleetv1alpha1.ReasonRetired,
			"the chassis is retired: out of service for good"), gen, s.now)
	case st.Phase.Fenced():
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionReady, string(st.Phase), quarantineMessage(st)), gen, s.now)
	case s.agent == metav1.ConditionFalse:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionReady, fleetv1alpha1.ReasonHeartbeatMissed, s.agentMessage), gen, s.now)
	case st.Phase == fleetv1alpha1.MacNodeReady, st.Phase == fleetv1alpha1.MacNodeLeased:
		conditions.Set(c, conditions.True(fleetv1alpha1.ConditionReady, string(st.Phase), "the chassis serves leases"), gen, s.now)
	case len(s.unreported) > 0:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionReady, fleetv1alpha1.ReasonAwaitingFacts,
			"the chassis waits for its host agent to report "+strings.Join(s.unreported, ", ")), gen, s.now)
	default:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionReady, fleetv1alpha1.ReasonAwaitingCompliance,
			fmt.Sprintf("the chassis is %s", phase.OrPending(st.Phase))), gen, s.now)
	}
}
