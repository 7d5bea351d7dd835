package host

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// The taint the agent sets when it creates its Node. The operator owns
// macrack.io/ taints afterwards, and every macrack.io/ label always: the
// agent sets none (agent.scope refuses them), so that a compromised agent
// cannot label its Node as another chassis.
const (
	UnleasedKey = fleetv1alpha1.UnleasedTaint
	// VMResource is the Node's capacity in macOS VMs: the class's
	// vmCapacity, never above the kernel's two.
	VMResource = fleetv1alpha1.VMResource
)

// Register creates the chassis' Node, or adopts the one that exists: an
// existing Node is never deleted or recreated, and its taints are never
// touched after creation. kubeletPort, if not zero, is published as the
// Node's kubelet endpoint: the port of the agent's kubelet API, where the
// API server sends exec and logs (the address is the operator's to set).
// It returns the MacNode it registered for.
func Register(ctx context.Context, c client.Client, nodeName string, kubeletPort int32) (*fleetv1alpha1.MacNode, error) {
	mn := &fleetv1alpha1.MacNode{}
	if err := c.Get(ctx, client.ObjectKey{Name: nodeName}, mn); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: no MacNode %s", ErrNotEnrolled, nodeName)
		}
		return nil, fmt.Errorf("getting MacNode %s: %w", nodeName, err)
	}
	class := &fleetv1alpha1.MacNodeClass{}
	if err := c.Get(ctx, client.ObjectKey{Name: mn.Spec.NodeClassName}, class); err != nil {
		return nil, fmt.Errorf("getting MacNodeClass %s: %w", mn.Spec.NodeClassName, err)
	}
	capacity := *resource.NewQuantity(int64(min(class.Spec.VMCapacity, fleetv1alpha1.KernelVMLimit)), resource.DecimalSI)

	node := &corev1.Node{}
	err := c.Get(ctx, client.ObjectKey{Name: nodeName}, node)
	switch {
	case apierrors.IsNotFound(err):
		node = &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: nodeName},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: UnleasedKey, Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{
				Capacity:        corev1.ResourceList{VMResource: capacity},
				Allocatable:     corev1.ResourceList{VMResource: capacity},
				DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: kubeletPort}},
			},
		}
		if err := c.Create(ctx, node); err != nil {
			return nil, fmt.Errorf("creating Node %s: %w", nodeName, err)
		}
		return mn, nil
	case err != nil:
		return nil, fmt.Errorf("getting Node %s: %w", nodeName, err)
	}
	// Adopt: only the capacity and the kubelet port are the agent's to
	// correct.
	have := node.Status.Capacity[VMResource]
	haveAlloc := node.Status.Allocatable[VMResource]
	if have.Cmp(capacity) == 0 && haveAlloc.Cmp(capacity) == 0 && node.Status.DaemonEndpoints.KubeletEndpoint.Port == kubeletPort {
		return mn, nil
	}
	updated := node.DeepCopy()
	if updated.Status.Capacity == nil {
		updated.Status.Capacity = corev1.ResourceList{}
	}
	if updated.Status.Allocatable == nil {
		updated.Status.Allocatable = corev1.ResourceList{}
	}
	updated.Status.Capacity[VMResource] = capacity
	updated.Status.Allocatable[VMResource] = capacity
	updated.Status.DaemonEndpoints.KubeletEndpoint.Port = kubeletPort
	if err := c.Status().Patch(ctx, updated, client.MergeFrom(node)); err != nil {
		return nil, fmt.Errorf("advertising capacity and the kubelet port on Node %s: %w", nodeName, err)
	}
	return mn, nil
}
