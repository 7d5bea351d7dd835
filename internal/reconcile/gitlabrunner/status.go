package gitlabrunner

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
)

// updateStatus computes the runner's status from what this pass observed.
// Every condition the controller owns is set on every pass it observed it.
func (r *Reconciler) updateStatus(s *scope) {
	runner := s.runner
	now := metav1.NewTime(s.now)
	gen := runner.Generation
	st := &runner.Status
	c := &st.Conditions
	deleting := !runner.DeletionTimestamp.IsZero()

	if reg := s.registered; reg.set {
		cond := conditions.False(workloadsv1alpha1.ConditionRegistered, reg.reason, reg.message)
		if reg.ok {
			cond = conditions.True(workloadsv1alpha1.ConditionRegistered, reg.reason, reg.message)
		}
		if conditions.Set(c, cond, gen, now) && !reg.ok {
			r.Recorder.Eventf(runner, nil, corev1.EventTypeWarning, reg.reason, "Register", "%s", reg.message)
		}
	} else if len(*c) == 0 {
		conditions.Set(c, conditions.Unknown(workloadsv1alpha1.ConditionRegistered, workloadsv1alpha1.ReasonPoolFilling, "not verified yet"), gen, now)
	}

	if !deleting {
		st.Idle, st.Busy, st.Slots = s.idle, s.busy, s.slots
	}
	switch {
	case deleting:
		conditions.Set(c, conditions.False(workloadsv1alpha1.ConditionReady, workloadsv1alpha1.ReasonDeleting,
			"deleting: its VMs go first, then its managers in GitLab"), gen, now)
	case s.capacity > 0 && s.idle+s.busy >= s.capacity:
		conditions.Set(c, conditions.True(workloadsv1alpha1.ConditionReady, workloadsv1alpha1.ReasonPoolFull,
			fmt.Sprintf("%d of %d VMs booted: %d idle, %d busy", s.idle+s.busy, s.capacity, s.idle, s.busy)), gen, now)
	default:
		conditions.Set(c, conditions.False(workloadsv1alpha1.ConditionReady, workloadsv1alpha1.ReasonPoolFilling,
			fmt.Sprintf("%d of %d VMs booted: %d idle, %d busy", s.idle+s.busy, s.capacity, s.idle, s.busy)), gen, now)
	}

	if b := s.blocked; b.set {
		if conditions.Set(c, conditions.True(workloadsv1alpha1.ConditionDegraded, b.reason, b.message), gen, now) {
			r.Recorder.Eventf(runner, nil, corev1.EventTypeWarning, b.reason, "Reconcile", "%s", b.message)
		}
	} else if !deleting {
		conditions.Set(c, conditions.False(workloadsv1alpha1.ConditionDegraded, workloadsv1alpha1.ReasonAsExpected, "nothing keeps the pool from its concurrency"), gen, now)
	}
}
