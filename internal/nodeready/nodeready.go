// Package nodeready decides a chassis' core/v1 Node Ready condition, the
// one a kubelet would post. Two writers share it, one value each, as they
// do for a kubelet's Node:
//   - the operator writes True and False, from the agent's heartbeat Lease
//     (in kube-node-lease) and the facts the agent reported;
//   - kube-controller-manager's node lifecycle controller writes Unknown
//     when that Lease goes stale.
//
// The agent writes no condition. So that the two writers never undo each
// other, the operator leaves a condition that already says what it would
// (differing only in reason, message or times), and leaves
// kube-controller-manager's Unknown until the agent renews its heartbeat
// after it.
package nodeready

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// Observation is what the operator knows of a chassis' agent.
type Observation struct {
	// Heartbeat is the heartbeat Lease's last renewal; zero when the agent
	// has none.
	Heartbeat time.Time
	// Stale: the heartbeat is older than the operator's grace.
	Stale bool
	// Unreported names the facts the policies judge that the agent has not
	// reported yet.
	Unreported []string
	// Message says why, for a stale or missing heartbeat.
	Message string
}

// Desired is the Ready condition o calls for, without its times: True only
// while the agent heartbeats and has reported its facts.
func Desired(o Observation) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse}
	switch {
	case o.Stale:
		c.Reason, c.Message = fleetv1alpha1.ReasonHeartbeatMissed, "MacRack host agent: "+o.Message
	case o.Heartbeat.IsZero():
		c.Reason, c.Message = fleetv1alpha1.ReasonNotReported, "MacRack host agent: "+o.Message
	case len(o.Unreported) > 0:
		c.Reason, c.Message = fleetv1alpha1.ReasonAwaitingFacts, "MacRack host agent has not reported "+strings.Join(o.Unreported, ", ")
	default:
		c.Status = corev1.ConditionTrue
		c.Reason, c.Message = fleetv1alpha1.ReasonHeartbeatCurrent, "MacRack host agent heartbeats and has reported its facts"
	}
	return c
}

// Agrees reports whether current, the Node's Ready condition (nil if it has
// none), already says what want does, so that the operator leaves it:
//   - the same status, whatever the reason, message and times;
//   - for a False want, any condition but True: a Node with none is not
//     ready to anyone, and Unknown is kube-controller-manager's word on the
//     same silence, which it would write back over a False;
//   - for a True want, an Unknown set at or after heartbeat, the agent's
//     last renewal: kube-controller-manager saw that renewal go stale, by
//     its own clock and grace, and only a newer one overturns its word.
func Agrees(current *corev1.NodeCondition, want corev1.NodeCondition, heartbeat time.Time) bool {
	if current == nil {
		return want.Status != corev1.ConditionTrue
	}
	switch {
	case current.Status == want.Status:
		return true
	case want.Status != corev1.ConditionTrue:
		return current.Status != corev1.ConditionTrue
	case current.Status == corev1.ConditionUnknown:
		return !heartbeat.After(current.LastTransitionTime.Time)
	}
	return false
}

// Find returns the Ready condition in conds, or nil.
func Find(conds []corev1.NodeCondition) *corev1.NodeCondition {
	for i := range conds {
		if conds[i].Type == corev1.NodeReady {
			return &conds[i]
		}
	}
	return nil
}

// IsTrue reports whether conds hold a Ready condition that is True.
func IsTrue(conds []corev1.NodeCondition) bool {
	c := Find(conds)
	return c != nil && c.Status == corev1.ConditionTrue
}

// Set puts want into conds, at now, unless the Ready condition there
// agrees with it; it reports whether it changed conds. A True's
// LastHeartbeatTime is the agent's last renewal. A False keeps the one of
// the condition it replaces: the node lifecycle controller takes any new
// LastHeartbeatTime for a sign of life, and would put its Unknown off by
// its grace for a write that says the agent is silent.
func Set(conds []corev1.NodeCondition, want corev1.NodeCondition, heartbeat, now time.Time) ([]corev1.NodeCondition, bool) {
	current := Find(conds)
	if Agrees(current, want, heartbeat) {
		return conds, false
	}
	beat := metav1.NewTime(heartbeat)
	switch {
	case want.Status != corev1.ConditionTrue && current != nil:
		beat = current.LastHeartbeatTime
	case heartbeat.IsZero():
		beat = metav1.NewTime(now)
	}
	want.LastHeartbeatTime = beat
	want.LastTransitionTime = metav1.NewTime(now)
	out := make([]corev1.NodeCondition, len(conds), len(conds)+1)
	copy(out, conds)
	if c := Find(out); c != nil {
		*c = want
		return out, true
	}
	return append(out, want), true
}
