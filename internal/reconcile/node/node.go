package node

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/taints"
)

// reconcileNode keeps the Node's macrack.io/ taints and labels as the
// MacNode, its binding and the quarantine say, and touches nothing else on
// it: the operator writes every macrack.io/ label of a Node.
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
		// Taints first: the Ready patch below changes the resourceVersion
		// this optimistic lock was read at.
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
	if err := r.publishAddress(ctx, n, s); err != nil {
		return err
	}
	if s.agent == metav1.ConditionFalse {
		return r.markNodeNotReady(ctx, n, s)
	}
	return nil
}

// publishAddress makes the MacNode's spec.address the Node's only address,
// an InternalIP: the API server sends exec and logs there. The agent may
// not write the addresses (agent.scope), so that it cannot point the API
// server, and the credentials it presents, at another host.
func (r *Reconciler) publishAddress(ctx context.Context, n *corev1.Node, s *scope) error {
	var want []corev1.NodeAddress
	if a := s.node.Spec.Address; a != "" {
		want = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: a}}
	}
	if equality.Semantic.DeepEqual(want, n.Status.Addresses) || len(want) == 0 && len(n.Status.Addresses) == 0 {
		return nil
	}
	updated := n.DeepCopy()
	updated.Status.Addresses = want
	// Optimistic: the list is replaced whole, over what was read.
	if err := r.Client.Status().Patch(ctx, updated, client.MergeFromWithOptions(n, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("publishing the address of Node %s: %w", n.Name, err)
	}
	r.Recorder.Eventf(s.node, updated, corev1.EventTypeNormal, "NodeAddressPublished", "PublishAddress", "Node %s's address is now %q", n.Name, s.node.Spec.Address)
	*n = *updated
	return nil
}

// markNodeNotReady sets the Node's Ready condition to False when the agent
// fell silent, as the node lifecycle controller would for a kubelet.
func (r *Reconciler) markNodeNotReady(ctx context.Context, n *corev1.Node, s *scope) error {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonHeartbeatMissed {
			return nil
		}
	}
	updated := n.DeepCopy()
	cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: fleetv1alpha1.ReasonHeartbeatMissed,
		Message: "MacRack host agent: " + s.agentMessage, LastTransitionTime: s.now, LastHeartbeatTime: s.now}
	replaced := false
	for i := range updated.Status.Conditions {
		if updated.Status.Conditions[i].Type == corev1.NodeReady {
			updated.Status.Conditions[i] = cond
			replaced = true
		}
	}
	if !replaced {
		updated.Status.Conditions = append(updated.Status.Conditions, cond)
	}
	if err := r.Client.Status().Patch(ctx, updated, client.MergeFrom(n)); err != nil {
		return fmt.Errorf("marking Node %s not ready: %w", n.Name, err)
	}
	r.Recorder.Eventf(s.node, updated, corev1.EventTypeWarning, fleetv1alpha1.ReasonHeartbeatMissed, "Heartbeat", "%s", s.agentMessage)
	return nil
}
