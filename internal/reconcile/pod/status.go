package pod

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
	"github.com/boualleiguie/macrack-operator/internal/phase"
)

// Reasons of the Pod's Ready condition when it is False.
const (
	ReasonGuestReady    = "GuestReadyForWork"
	ReasonVMNotRunning  = "VMNotRunning"
	ReasonGuestNotReady = "GuestNotReadyForWork"
	ReasonNodeNotReady  = "NodeNotReady"
)

// updateStatus sets the instance's Pod condition from what this pass saw.
func (r *Reconciler) updateStatus(s *scope) {
	var c metav1.Condition
	switch {
	case s.taken != "":
		c = conditions.False(computev1alpha1.ConditionPod, computev1alpha1.ReasonPodNameTaken, s.taken)
	case s.refused != "":
		c = conditions.False(computev1alpha1.ConditionPod, computev1alpha1.ReasonPodRefused,
			"the Pod that shows this instance in its namespace was refused, and is tried again; the VM is unaffected: "+truncate(s.refused, 512))
	case !s.placed:
		// Placed says why an instance waits; Pod speaks only once it was
		// placed, and lost its slot.
		if meta.FindStatusCondition(s.inst.Status.Conditions, computev1alpha1.ConditionPod) == nil {
			return
		}
		c = conditions.False(computev1alpha1.ConditionPod, computev1alpha1.ReasonNotPlaced, "the instance holds no slot on a chassis, so it has no Pod")
	case s.pod != nil || s.replacing:
		c = conditions.True(computev1alpha1.ConditionPod, computev1alpha1.ReasonPodCurrent,
			fmt.Sprintf("Pod %s on Node %s shows this instance", s.inst.Name, s.inst.Status.NodeName))
	default:
		// Being deleted, and its Pod is gone: it is not made again.
		c = conditions.False(computev1alpha1.ConditionPod, computev1alpha1.ReasonNotPlaced, "the instance is being deleted; its Pod is not made again")
	}
	if conditions.Set(&s.inst.Status.Conditions, c, s.inst.Generation, metav1.NewTime(s.now)) &&
		(c.Reason == computev1alpha1.ReasonPodRefused || c.Reason == computev1alpha1.ReasonPodNameTaken) {
		r.Recorder.Eventf(s.inst, nil, corev1.EventTypeWarning, c.Reason, "CreatePod", "%s", c.Message)
	}
}

// mirror writes the instance's state into its Pod's status, if it changed:
// phase, conditions and the container's state. The Pod has no IP: the VMs'
// NAT addresses repeat on every chassis, and none is routable from the
// cluster.
func (r *Reconciler) mirror(ctx context.Context, s *scope) error {
	if s.inst.Status.Runtime == nil && asCreated(s.pod) {
		// The agent has reported nothing of the VM yet. The Pod as the API
		// server stored it (which keeps no status from a create) is Pending
		// with no condition and no container's state, which is already not
		// ready to every reader; the agent's first report makes the first
		// write, one a life fewer (issue 39).
		return nil
	}
	want := podStatus(s.pod, s.inst, s.node, metav1.NewTime(s.now))
	if equality.Semantic.DeepEqual(want, s.pod.Status) {
		return nil
	}
	updated := s.pod.DeepCopy()
	updated.Status = want
	// kube-controller-manager's node lifecycle controller writes Ready
	// too: the lock keeps a stale read from undoing its write.
	if err := r.Client.Status().Patch(ctx, updated, client.MergeFromWithOptions(s.pod, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("writing the status of Pod %s: %w", klog.KObj(s.pod), err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Pod status written", "Pod", klog.KObj(s.pod), "phase", want.Phase, "ready", podReady(&want))
	s.pod = updated
	return nil
}

// podStatus is the Pod's status for the instance's state. Ready takes the
// chassis' heartbeat from the Node's Ready condition, as kube-controller-
// manager's node lifecycle controller does when it marks Pods NotReady, so
// that the two never disagree.
func podStatus(p *corev1.Pod, inst *computev1alpha1.MacOSInstance, node *corev1.Node, now metav1.Time) corev1.PodStatus {
	rt := inst.Status.Runtime
	if rt == nil {
		rt = &computev1alpha1.RuntimeStatus{}
	}
	podPh := podPhase(inst)
	readyStatus, reason, message := corev1.ConditionTrue, ReasonGuestReady, "the guest reports ready for work, and the chassis heartbeats"
	switch {
	case rt.Phase != computev1alpha1.VMRunning:
		readyStatus, reason, message = corev1.ConditionFalse, ReasonVMNotRunning, "the VM is "+string(phase.OrPending(rt.Phase))
	case !rt.ReadyForWork:
		readyStatus, reason, message = corev1.ConditionFalse, ReasonGuestNotReady, "the guest does not report ready for work yet"
	case !nodeReady(node):
		readyStatus, reason, message = corev1.ConditionFalse, ReasonNodeNotReady, fmt.Sprintf("the chassis' Node %s is not Ready: its heartbeat is not current", inst.Status.NodeName)
	}
	out := corev1.PodStatus{Phase: podPh, StartTime: p.Status.StartTime, QOSClass: p.Status.QOSClass}
	if out.StartTime == nil {
		// When the operator took the Pod on, as a kubelet's start time is
		// when it acknowledged the Pod, before the first status it writes.
		start := p.CreationTimestamp
		if start.IsZero() {
			start = now
		}
		out.StartTime = &start
	}
	for _, c := range []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
		{Type: corev1.ContainersReady, Status: readyStatus, Reason: reason, Message: message},
		{Type: corev1.PodReady, Status: readyStatus, Reason: reason, Message: message},
	} {
		c.LastTransitionTime = now
		for _, old := range p.Status.Conditions {
			if old.Type == c.Type && old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		out.Conditions = append(out.Conditions, c)
	}
	var old *corev1.ContainerStatus
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == fleetv1alpha1.InstanceContainer {
			old = &p.Status.ContainerStatuses[i]
		}
	}
	out.ContainerStatuses = []corev1.ContainerStatus{{
		Name:    fleetv1alpha1.InstanceContainer,
		Image:   fleetv1alpha1.InstancePodImage,
		Ready:   readyStatus == corev1.ConditionTrue,
		Started: ptr.To(podPh == corev1.PodRunning),
		State:   containerState(rt, old, now),
	}}
	return out
}

// podPhase maps the VM's phase to the Pod's.
func podPhase(inst *computev1alpha1.MacOSInstance) corev1.PodPhase {
	if inst.Status.Runtime == nil {
		return corev1.PodPending
	}
	switch inst.Status.Runtime.Phase {
	case computev1alpha1.VMStarting, computev1alpha1.VMRunning, computev1alpha1.VMStopping:
		return corev1.PodRunning
	case computev1alpha1.VMStopped:
		return corev1.PodSucceeded
	case computev1alpha1.VMFailed:
		return corev1.PodFailed
	}
	return corev1.PodPending
}

// containerState is the VM's state as a container's: waiting with the
// VM's phase as its reason, running, or terminated. A start or finish time
// already written is kept.
func containerState(rt *computev1alpha1.RuntimeStatus, old *corev1.ContainerStatus, now metav1.Time) corev1.ContainerState {
	var was corev1.ContainerState
	if old != nil {
		was = old.State
	}
	switch rt.Phase {
	case computev1alpha1.VMStarting, computev1alpha1.VMRunning, computev1alpha1.VMStopping:
		started := now
		if was.Running != nil {
			started = was.Running.StartedAt
		}
		return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
	case computev1alpha1.VMStopped, computev1alpha1.VMFailed:
		t := &corev1.ContainerStateTerminated{Reason: string(rt.Phase), Message: truncate(rt.Message, 512), FinishedAt: now}
		if rt.Phase == computev1alpha1.VMFailed {
			t.ExitCode = 1
		}
		if rt.LastStop != nil {
			t.FinishedAt = rt.LastStop.At
			if rt.LastStop.Reason != "" {
				t.Reason = rt.LastStop.Reason
			}
		}
		switch {
		case was.Terminated != nil:
			t.StartedAt, t.FinishedAt = was.Terminated.StartedAt, was.Terminated.FinishedAt
		case was.Running != nil:
			t.StartedAt = was.Running.StartedAt
		}
		return corev1.ContainerState{Terminated: t}
	}
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: string(phase.OrPending(rt.Phase)), Message: truncate(rt.Message, 512)}}
}

// asCreated: the Pod's status is what the API server sets on a create,
// Pending and its QoS class: nobody wrote it since.
func asCreated(p *corev1.Pod) bool {
	st := p.Status
	return (st.Phase == "" || st.Phase == corev1.PodPending) && len(st.Conditions) == 0 &&
		len(st.ContainerStatuses) == 0 && st.StartTime == nil
}

func terminal(p corev1.PodPhase) bool { return p == corev1.PodSucceeded || p == corev1.PodFailed }

func podReady(st *corev1.PodStatus) bool {
	for _, c := range st.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeReady: the Node's Ready condition is True. The operator sets it True
// and False from the agent's heartbeat (internal/nodeready);
// kube-controller-manager makes it Unknown when the heartbeats stop.
func nodeReady(n *corev1.Node) bool {
	if n == nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
