package gitlabrunner

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// reconcileDelete tears a deleted runner down: its VMs first (each agent
// ends the job under way as a system failure, stops the VM and wipes its
// disk), then its managers in GitLab, then the finalizer.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	runner := s.runner
	owned, _, err := r.ownedInstances(ctx, runner)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(owned) > 0 {
		var errs []error
		for _, inst := range owned {
			if !inst.DeletionTimestamp.IsZero() {
				continue
			}
			if s.tenantErr != nil {
				return ctrl.Result{}, s.tenantErr
			}
			err := r.end(ctx, s, inst, "the runner is deleted")
			if apierrors.IsForbidden(errors.Unwrap(err)) || apierrors.IsForbidden(err) {
				s.blocked.to(false, workloadsv1alpha1.ReasonIdentityMissing,
					"ServiceAccount %s/%s may no longer delete the runner's VMs: restore its binding, or delete instance %s yourself",
					runner.Namespace, workloadsv1alpha1.RunnerServiceAccount, inst.Name)
				continue
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		// Each VM's going wakes the runner (the instance watch).
		return ctrl.Result{RequeueAfter: waitRetry}, errors.Join(errs...)
	}
	if !r.unregister(ctx, s) {
		return ctrl.Result{RequeueAfter: waitRetry}, nil
	}
	r.mu.Lock()
	delete(r.verified, runner.UID)
	delete(r.unregistering, runner.UID)
	r.mu.Unlock()
	controllerutil.RemoveFinalizer(runner, workloadsv1alpha1.RunnerFinalizer)
	s.deleted = true
	return ctrl.Result{}, nil
}

// unregister removes the runner's managers (one per slot it may have used)
// from GitLab. It reports whether the runner may go: when they are gone,
// when there is nothing GitLab would take (the token is revoked or
// unreadable), or when GitLab stayed unreachable past unregisterPatience,
// which an Event reports: a stale manager does no harm, a runner that
// cannot be deleted does.
func (r *Reconciler) unregister(ctx context.Context, s *scope) bool {
	runner := s.runner
	gl, ok := r.connect(s)
	if ok {
		ok = s.tenantErr == nil && r.readToken(ctx, s)
	}
	if !ok {
		r.Recorder.Eventf(runner, nil, corev1.EventTypeWarning, workloadsv1alpha1.ReasonUnregisterFailed, "Unregister",
			"the runner's managers stay registered in GitLab: %s; remove them on the runner's page in GitLab", s.registered.message)
		return true
	}
	r.mu.Lock()
	if r.unregistering == nil {
		r.unregistering = map[types.UID]time.Time{}
	}
	first, seen := r.unregistering[runner.UID]
	if !seen {
		first = s.now
		r.unregistering[runner.UID] = first
	}
	r.mu.Unlock()

	n := max(1, runner.Spec.Concurrency)
	for _, ps := range runner.Status.Slots {
		n = max(n, ps.Index+1)
	}
	for slot := int32(0); slot < n; slot++ {
		id := SystemID(string(runner.UID), slot)
		err := gl.UnregisterManager(ctx, s.token, id)
		switch {
		case err == nil, errors.Is(err, gitlab.ErrNotFound):
			r.Recorder.Eventf(runner, nil, corev1.EventTypeNormal, workloadsv1alpha1.ReasonManagerUnregistered, "Unregister", "manager %s unregistered from GitLab", id)
		case errors.Is(err, gitlab.ErrForbidden):
			// A revoked token has no managers left to remove.
			return true
		default:
			if s.now.Sub(first) < unregisterPatience {
				s.blocked.to(false, workloadsv1alpha1.ReasonGitLabUnreachable, "unregistering manager %s: %v", id, err)
				return false
			}
			r.Recorder.Eventf(runner, nil, corev1.EventTypeWarning, workloadsv1alpha1.ReasonUnregisterFailed, "Unregister",
				"manager %s stays registered in GitLab: %v (for %s); remove it on the runner's page in GitLab", id, err, unregisterPatience)
		}
	}
	return true
}
