package node

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/nodeready"
	"github.com/boualleiguie/macrack-operator/internal/taints"
)

// reconcileNode keeps the Node's macrack.io/ taints and labels as the
// MacNode, its binding and the quarantine say, its address, and its Ready
// condition as the heartbeat says, and touches nothing else on it: the
// operator writes every macrack.io/ label of a Node.
func (r *Reconciler) reconcileNode(ctx context.Context, s *scope) error {
	n := &corev1.Node{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: s.node.Name}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // the agent has not registered yet; its creation re-enqueues us
		}
		return fmt.Errorf("getting Node %s: %w", s.node.Name, err)
	}
	s.nodeFound = true
	tenant := ""
	if b := s.node.Status.Binding; b != nil {
		tenant = b.LeaseNamespace
	}
	desired := taints.Desired(tenant)
	if s.node.Status.Phase.Fenced() {
		desired = taints.Quarantined(desired)
	}
	updated := n.DeepCopy()
	var taintsChanged, labelsChanged bool
	updated.Spec.Taints, taintsChanged = taints.Apply(n.Spec.Taints, desired)
	updated.Labels, labelsChanged = taints.Labels(n.Labels, taints.DesiredLabels(s.node.Spec.Serial, s.node.Spec.NodeClassName, tenant))
	if taintsChanged || labelsChanged {
		// Metadata first: the status patch below changes the
		// resourceVersion this optimistic lock was read at.
		if err := r.Client.Patch(ctx, updated, client.MergeFromWithOptions(n, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("updating taints of Node %s: %w", n.Name, err)
		}
		what := "unleased"
		if tenant != "" {
			what = "leased to " + tenant
		}
		if s.node.Status.Phase.Fenced() {
			what += ", and quarantined"
		}
		r.Recorder.Eventf(s.node, updated, corev1.EventTypeNormal, "NodeTainted", "Taint", "Node %s is now %s", n.Name, what)
		n = updated
	}
	return r.patchNodeStatus(ctx, n, s)
}

// patchNodeStatus writes the Node's status once: its address, which the
// MacNode's spec.address makes the only one, an InternalIP (the API
// server sends exec and logs there; the agent may not write the addresses,
// agent.scope, so that it cannot point the API server, and the
// credentials it presents, at another host), and its Ready condition as
// the heartbeat and the facts say, unless it already agrees
// (nodeready.Agrees): True and False are the operator's,
// kube-controller-manager's node lifecycle controller writes Unknown when
// the heartbeat goes stale.
//
// Ready alone goes as a strategic merge patch of that one condition, so
// that it never writes back a stale copy of the others. An address
// replaces the list whole, so its write carries the resourceVersion read,
// and the Ready condition, if it changed too, rides along in it.
func (r *Reconciler) patchNodeStatus(ctx context.Context, n *corev1.Node, s *scope) error {
	var addresses []corev1.NodeAddress
	if a := s.node.Spec.Address; a != "" {
		addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: a}}
	}
	addressChanged := !equality.Semantic.DeepEqual(addresses, n.Status.Addresses) && (len(addresses) > 0 || len(n.Status.Addresses) > 0)
	want := nodeready.Desired(nodeready.Observation{Heartbeat: s.heartbeat, Stale: s.agent == metav1.ConditionFalse,
		Unreported: s.unreported, Message: s.agentMessage})
	conds, readyChanged := nodeready.Set(n.Status.Conditions, want, s.heartbeat, s.now.Time)
	if !addressChanged && !readyChanged {
		return nil
	}
	updated := n.DeepCopy()
	p := client.StrategicMergeFrom(n)
	if addressChanged {
		updated.Status.Addresses = addresses
		p = client.MergeFromWithOptions(n, client.MergeFromWithOptimisticLock{})
	}
	if readyChanged {
		updated.Status.Conditions = conds
	}
	if err := r.Client.Status().Patch(ctx, updated, p); err != nil {
		if addressChanged {
			return fmt.Errorf("publishing the address of Node %s: %w", n.Name, err)
		}
		return fmt.Errorf("setting the Ready condition of Node %s to %s: %w", n.Name, want.Status, err)
	}
	if addressChanged {
		r.Recorder.Eventf(s.node, updated, corev1.EventTypeNormal, "NodeAddressPublished", "PublishAddress", "Node %s's address is now %q", n.Name, s.node.Spec.Address)
	}
	if readyChanged {
		if want.Status == corev1.ConditionFalse && want.Reason == fleetv1alpha1.ReasonHeartbeatMissed {
			r.Recorder.Eventf(s.node, updated, corev1.EventTypeWarning, fleetv1alpha1.ReasonHeartbeatMissed, "Heartbeat", "%s", s.agentMessage)
		}
		ctrl.LoggerFrom(ctx).Info("Node Ready condition set", "Node", n.Name, "status", want.Status, "reason", want.Reason)
	}
	*n = *updated
	return nil
}
