package lease

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/chassis"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/requeue"
)

// releaseOrphans releases the chassis whose binding names the lease key
// but not the lease that has it now (live, or none): a binding whose lease
// is gone, which only a forced removal of the lease's finalizer leaves
// behind. The binding is the lease controller's, whether or not its lease
// still exists: it holds the chassis until earliestReleaseAt all the same;
// then the lease's instances are deleted, and once they are wiped, their
// slots freed and the chassis reported empty, the binding is cleared into
// the history.
func (r *Reconciler) releaseOrphans(ctx context.Context, key types.NamespacedName, live types.UID) (ctrl.Result, error) {
	nodes := &fleetv1alpha1.MacNodeList{}
	if err := r.Client.List(ctx, nodes, client.MatchingFields{index.MacNodeByLease: index.LeaseKey(key.Namespace, key.Name)}); err != nil {
		return ctrl.Result{}, fmt.Errorf("finding the MacNodes bound to %s: %w", key, err)
	}
	var res ctrl.Result
	var errs []error
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if b := n.Status.Binding; b == nil || b.LeaseUID == live {
			continue
		}
		orphanRes, err := r.releaseOrphan(ctx, n)
		res = requeue.Lowest(res, orphanRes)
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// releaseOrphan takes one orphaned binding's release a step further.
func (r *Reconciler) releaseOrphan(ctx context.Context, node *fleetv1alpha1.MacNode) (ctrl.Result, error) {
	b := node.Status.Binding
	now := r.Clock.Now()
	log := ctrl.LoggerFrom(ctx).WithValues("MacNode", node.Name, "leaseUID", b.LeaseUID)
	if now.Before(b.EarliestReleaseAt.Time) {
		log.V(1).Info("Binding outlives its lease; the chassis stays held", "earliestReleaseAt", b.EarliestReleaseAt.UTC())
		return ctrl.Result{RequeueAfter: b.EarliestReleaseAt.Sub(now)}, nil
	}
	d, err := r.StatusWrite(ctx, chassis.Freed(node, now), node, nil)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !d.Allowed() {
		return ctrl.Result{}, fmt.Errorf("freeing MacNode %s refused: %s", node.Name, d.Violations[0].Message)
	}
	out, err := chassis.Release(ctx, r.Client, node, b.LeaseNamespace, b.LeaseName, now)
	switch {
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: conflict.RetryAfter}, nil
	case err != nil:
		return ctrl.Result{}, err
	case out.Freed == nil:
		// The instances' deletions, placement's slot writes and the
		// agent's reports enqueue the lease key again; the node
		// controller's Leased condition says what the chassis waits for.
		return ctrl.Result{}, nil
	}
	r.Recorder.Eventf(out.Freed, nil, corev1.EventTypeNormal, "ChassisReleased", "Release",
		"Released chassis %s: its lease %s/%s is gone and earliestReleaseAt has passed", out.Freed.Spec.Serial, b.LeaseNamespace, b.LeaseName)
	log.Info("Orphaned binding released")
	return ctrl.Result{}, nil
}
