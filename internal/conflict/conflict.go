// Package conflict retries, quietly, a reconcile pass that lost an
// optimistic-concurrency race. A write refused with 409 Conflict ("the
// object has been modified") means only that the pass read an older
// version than the API server holds; the next pass, on the newer one,
// settles it. controller-runtime logs every returned error as a
// "Reconciler error", at error level with a stack, which cries wolf: a
// wrapped reconciler logs the conflict at V(1) and requeues the request
// with the same per-item exponential backoff an error would have had, as
// internal/reconcile/lease does for a lost race for a chassis.
package conflict

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Backoff bounds the retries of one request that keeps conflicting:
// controller-runtime's own per-item defaults.
const (
	baseDelay = 5 * time.Millisecond
	maxDelay  = 1000 * time.Second
)

// Quiet wraps r: a pass whose error is (or wraps) a Conflict is retried
// after a backoff and logged at V(1); every other result passes through.
func Quiet(r reconcile.Reconciler) reconcile.Reconciler {
	return &quiet{inner: r, backoff: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](baseDelay, maxDelay)}
}

type quiet struct {
	inner   reconcile.Reconciler
	backoff workqueue.TypedRateLimiter[reconcile.Request]
}

func (q *quiet) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	res, err := q.inner.Reconcile(ctx, req)
	if err == nil || !Is(err) {
		if err == nil {
			q.backoff.Forget(req)
		}
		return res, err
	}
	after := q.backoff.When(req)
	ctrl.LoggerFrom(ctx).V(1).Info("Lost an optimistic-concurrency race; retrying", "after", after.String(), "conflict", err.Error())
	return ctrl.Result{RequeueAfter: after}, nil
}

// Is reports whether err is, or wraps, a 409 Conflict from the API server.
// A terminal error is never retried, conflict or not.
func Is(err error) bool {
	return err != nil && apierrors.IsConflict(err) && !errors.Is(err, reconcile.TerminalError(nil))
}
