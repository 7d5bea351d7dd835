package pod

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// desiredPod is the instance's Pod: named after it, in its namespace,
// controlled by it, bound to its chassis' Node, with one container that
// requests one macOS VM. It meets the restricted Pod Security level, and
// the pod-shape admission policy pins every field set here.
func desiredPod(inst *computev1alpha1.MacOSInstance) *corev1.Pod {
	one := resource.MustParse("1")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      inst.Name,
			Namespace: inst.Namespace,
			Labels:    podLabels(inst),
			// No blockOwnerDeletion: nothing waits on the Pod, and setting it
			// would need the finalizers of instances.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: computev1alpha1.GroupVersion.String(), Kind: "MacOSInstance",
				Name: inst.Name, UID: inst.UID, Controller: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			NodeName: inst.Status.NodeName,
			Containers: []corev1.Container{{
				Name:  fleetv1alpha1.InstanceContainer,
				Image: fleetv1alpha1.InstancePodImage,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{fleetv1alpha1.VMResource: one},
					Limits:   corev1.ResourceList{fleetv1alpha1.VMResource: one},
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			// No kubelet runs it: a stopped VM is not restarted by one, and a
			// delete (the garbage collector's too) is never left waiting for
			// one to confirm it.
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			// The VM runs on the chassis whatever the Node looks like:
			// kube-controller-manager taints a Node whose agent fell silent
			// unreachable:NoExecute (or not-ready:NoExecute), and its
			// taint-based eviction must never delete the Pod of a running VM.
			// Without tolerationSeconds, for ever.
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
		},
	}
}

func podLabels(inst *computev1alpha1.MacOSInstance) map[string]string {
	return map[string]string{fleetv1alpha1.InstancePodLabel: "true", fleetv1alpha1.InstanceUIDLabel: string(inst.UID)}
}

// drifted: someone changed the labels the operator set, or the Pod is
// bound elsewhere. The operator never patches a Pod: it makes it again.
func drifted(p *corev1.Pod, inst *computev1alpha1.MacOSInstance) bool {
	for k, v := range podLabels(inst) {
		if p.Labels[k] != v {
			return true
		}
	}
	return p.Spec.NodeName != inst.Status.NodeName
}
