// Package image reconciles MacOSImages: it resolves each golden's pinned
// OCI artifact into status.resolved, with the Resolved condition, and keeps
// status.replicatedOn to the chassis whose agents report a verified copy.
// The artifact is the source of truth; the agent never writes MacOSImage.
package image

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit"
	"github.com/boualleiguie/macrack-operator/internal/patch"
)

// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macosimages,verbs=get;list;watch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macosimages/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=macrack-system,resources=secrets,verbs=get

// Reconciler reconciles MacOSImages.
type Reconciler struct {
	Client client.Client
	// APIReader reads pull Secrets uncached: the operator watches no Secret.
	APIReader client.Reader
	Clock     clock.PassiveClock
	Recorder  events.EventRecorder
	// Namespace holds the images' pull Secrets (the operator's own).
	Namespace string
	// ReplicaCoalesce is how long a chassis' report of its goldens waits
	// for others before the replicas are counted (DefaultReplicaCoalesce
	// if zero).
	ReplicaCoalesce time.Duration
}

// DefaultReplicaCoalesce bounds status.replicatedOn's writes to one per
// image every five seconds, and its lag behind the agents' reports to as
// much.
const DefaultReplicaCoalesce = 5 * time.Second

// SetupWithManager registers the controller and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1alpha1.MacOSImage{}).
		Named("macosimage").
		// A registry that is down is retried within a minute of its return,
		// not after the default backoff's 16 minutes.
		WithOptions(controller.Options{MaxConcurrentReconciles: 2,
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, time.Minute)}).
		Watches(&fleetv1alpha1.MacNode{}, r.reportHandler()).
		Complete(r)
}

// reportHandler enqueues the resolved images when the goldens a chassis
// reports verified change, ReplicaCoalesce later: every report of a fleet pulling
// at once within that window is one pass and one status write, not one
// each. Every agent watches the MacOSImages, so each write of
// status.replicatedOn (a serial per chassis) goes to the whole fleet. A
// MacNode write that leaves its verified copies as they were (a pull's
// progress, a slot, a binding) enqueues nothing.
func (r *Reconciler) reportHandler() handler.TypedEventHandler[client.Object, reconcile.Request] {
	after := r.ReplicaCoalesce
	if after == 0 {
		after = DefaultReplicaCoalesce
	}
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		// AddAfter keeps the earliest time of an image already waiting:
		// a report in the window joins the pass due, it never defers it.
		for _, req := range r.resolvedImages(ctx) {
			q.AddAfter(req, after)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if len(verifiedCopies(e.Object)) > 0 {
				enqueue(ctx, q)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if !slices.Equal(verifiedCopies(e.ObjectOld), verifiedCopies(e.ObjectNew)) {
				enqueue(ctx, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q)
		},
	}
}

// verifiedCopies are the goldens a chassis' agent reports verified, as
// name@digest: a pull's progress changes none of them.
func verifiedCopies(o client.Object) []string {
	n, ok := o.(*fleetv1alpha1.MacNode)
	if !ok || n.Status.Reported == nil {
		return nil
	}
	var out []string
	for _, i := range n.Status.Reported.Images {
		if i.Phase == fleetv1alpha1.ImageReady {
			out = append(out, i.Name+"@"+i.Digest)
		}
	}
	return out
}

// resolvedImages are the images a chassis' report may concern: a copy may
// have verified or gone. An unresolved image has no copies to
// count, and its retries are the rate limiter's. The catalogue is one
// golden per macOS and Xcode pair, a handful.
func (r *Reconciler) resolvedImages(ctx context.Context) []reconcile.Request {
	list := &fleetv1alpha1.MacOSImageList{}
	// Read, not copied: each carries a serial per chassis.
	if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing MacOSImages failed")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, i := range list.Items {
		if i.Status.Resolved != nil {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&i)})
		}
	}
	return reqs
}

// scope carries one pass's observations to the status computation.
type scope struct {
	image *fleetv1alpha1.MacOSImage
	// resolveReason and resolveMessage say why the artifact is not resolved.
	resolveReason, resolveMessage string
	// evicted are the serials whose verified copy went on this pass.
	evicted []string
}

// Reconcile resolves one golden and counts its verified copies.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	img := &fleetv1alpha1.MacOSImage{}
	if err := r.Client.Get(ctx, req.NamespacedName, img); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &scope{image: img}
	helper := patch.NewHelper(img, r.Client)
	before := img.Status.DeepCopy()
	defer func() {
		r.updateStatus(s)
		seq := img.Status.Audit.Next()
		audit.JournalImage(before, img, r.Clock.Now())
		if img.Status.Audit.Next() != seq {
			helper.LockStatus()
		}
		if err := helper.Patch(ctx, img); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("patching MacOSImage %s: %w", req.Name, err))
		}
	}()

	resolveErr := r.resolve(ctx, s)
	if err := r.countReplicas(ctx, s); err != nil {
		return ctrl.Result{}, errors.Join(resolveErr, err)
	}
	// A registry that did not answer is retried with the controller's
	// backoff; a refused artifact is not, its digest pins it.
	return ctrl.Result{}, resolveErr
}
