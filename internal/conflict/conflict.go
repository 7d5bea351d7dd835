// Package conflict retries, quietly, a reconcile pass that lost an
// optimistic-concurrency race. A write refused with 409 Conflict ("the
// object has been modified") means only that the pass read an older
// version than the API server holds; the next pass, on the newer one,
// settles it. controller-runtime logs every returned error as a
// "Reconciler error", at error level with a stack, which cries wolf: a
// wrapped reconciler logs the conflict at V(1) and requeues the request
// with the same per-item exponential backoff an error would have had, as
// internal/reconcile/lease does for a lost race for a chassis.
//
// A 404 Not Found is the same race from the other side: the pass read an
// object from the cache that the API server deleted that instant, and the
// next pass, after the delete event, no longer sees it. It is retried as
// quietly, but only a few times in a row: a NotFound that outlives
// staleRetries passes is no race, and surfaces as the error it is.
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

	// staleRetries is how many consecutive passes of one request may end
	// in NotFound before it is reported as an error. A delete event reaches
	// the cache within milliseconds; five backoffs (5 ms to 80 ms) outlast it.
	staleRetries = 5
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
	switch {
	case err == nil:
		q.backoff.Forget(req)
		return res, nil
	case Is(err):
		after := q.backoff.When(req)
		ctrl.LoggerFrom(ctx).V(1).Info("Lost an optimistic-concurrency race; retrying", "after", after.String(), "conflict", err.Error())
		return ctrl.Result{RequeueAfter: after}, nil
	case Stale(err) && q.backoff.NumRequeues(req) < staleRetries:
		after := q.backoff.When(req)
		ctrl.LoggerFrom(ctx).V(1).Info("Wrote to an object deleted under the cache; retrying", "after", after.String(), "notFound", err.Error())
		return ctrl.Result{RequeueAfter: after}, nil
	default:
		// Not ours to quieten: controller-runtime logs and backs off. The
		// count stays, so a NotFound that persists stays loud until a pass
		// succeeds.
		return res, err
	}
}

// Stale reports whether err is, or wraps, a 404 Not Found: the object a
// pass acted on is gone from the API server. Terminal errors are never
// retried.
func Stale(err error) bool {
	return err != nil && apierrors.IsNotFound(err) && !errors.Is(err, reconcile.TerminalError(nil))
}

// Is reports whether err is, or wraps, a 409 Conflict from the API server.
// A terminal error is never retried, conflict or not.
func Is(err error) bool {
	return err != nil && apierrors.IsConflict(err) && !errors.Is(err, reconcile.TerminalError(nil))
}

// failedPatch is the message the API server gives a JSON patch it could not
// apply, a failed test among them: a 422 with no causes, which drops the
// patch library's own words (k8s.io/apiserver, handlers/patch.go).
const failedPatch = "the server rejected our request due to an error in our request"

// Untested reports whether err is the API server's answer to a JSON patch
// that did not apply. A writer that locks a list or a sequence by a test
// operation (internal/finalizer, the audit journal) reads it as lost
// race, and answers with a Conflict. A refusal by validation or by an
// admission policy is also a 422, but names its causes or its rule.
func Untested(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) {
		return false
	}
	s := status.Status()
	return s.Message == failedPatch && (s.Details == nil || len(s.Details.Causes) == 0)
}

// RetryAfter is how soon a reconciler that lost an optimistic-concurrency
// race itself (a claim of a chassis or a slot, a status written with the
// resourceVersion read) looks again, from a fresher read.
const RetryAfter = 100 * time.Millisecond
