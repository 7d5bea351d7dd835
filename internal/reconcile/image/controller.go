// Package image reconciles MacOSImages: it resolves each golden's pinned
// OCI artifact into status.resolved, with the Resolved condition, and keeps
// status.replicas to the number of chassis whose agents report a verified
// copy.
// The artifact is the source of truth; the agent never writes MacOSImage.
package image

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/journal"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/patch"
)

// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macosimages,verbs=get;list;watch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macosimages/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=macrack-system,resources=secrets,verbs=get

// FieldOwner is the image controller's field manager. Each controller writes
// under its own, so that managedFields, and the writes suite's one-writer
// test, tell a status' owners apart.
const FieldOwner = "macrack-image"

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
	// Replicas counts the chassis by the verified copies their agents
	// report (NewReplicas), fed by the MacNode informer: a pass reads one
	// number, whatever the fleet's size. SetupWithManager makes and feeds
	// one if nil.
	Replicas *index.Count
}

// DefaultReplicaCoalesce bounds status.replicas' writes to one per image
// every five seconds, and its lag behind the agents' reports to as much.
const DefaultReplicaCoalesce = 5 * time.Second

// NewReplicas is the count of chassis by verified copy that Reconciler's
// Replicas holds: a Count of MacNodes by index.VerifiedImages.
func NewReplicas() *index.Count { return index.NewCount(index.VerifiedImages) }

// SetupWithManager registers the controller and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Replicas == nil {
		r.Replicas = NewReplicas()
	}
	after := r.ReplicaCoalesce
	if after == 0 {
		after = DefaultReplicaCoalesce
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1alpha1.MacOSImage{}).
		Named("macosimage").
		// A registry that is down is retried within a minute of its return,
		// not after the default backoff's 16 minutes.
		WithOptions(controller.Options{MaxConcurrentReconciles: 2,
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, time.Minute)}).
		WatchesRawSource(r.reportSource(mgr.GetCache(), after)).
		Complete(conflict.Quiet(r))
}

// reportSource feeds Replicas from the MacNode informer and enqueues an
// image when its count of verified copies changed, coalesce later: every
// report of a fleet pulling at once within that window is one pass and one
// status write, not one each. A MacNode write that leaves its verified
// copies as they were (a pull's progress, a slot, a binding) enqueues
// nothing, and a copy of one golden enqueues that golden alone. The
// controller's workers wait for its sync: a pass never counts half a
// fleet.
func (r *Reconciler) reportSource(informers cache.Informers, coalesce time.Duration) source.SyncingSource {
	return r.Replicas.Source(informers, &fleetv1alpha1.MacNode{}, "MacNode verified copies",
		func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) func(string) {
			return enqueueImage(q, coalesce)
		})
}

// enqueueImage enqueues the image of a verified copy's key, coalesce later.
// AddAfter keeps the earliest time of an image already waiting: a report in
// the window joins the pass due, it never defers it.
func enqueueImage(q workqueue.TypedRateLimitingInterface[reconcile.Request], coalesce time.Duration) func(key string) {
	return func(key string) {
		name, _, _ := strings.Cut(key, "@")
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}, coalesce)
	}
}

// scope carries one pass's observations to the status computation.
type scope struct {
	image *fleetv1alpha1.MacOSImage
	// resolveReason and resolveMessage say why the artifact is not resolved.
	resolveReason, resolveMessage string
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
		journal.Image(before, img, r.Clock.Now())
		if img.Status.Audit.Next() != seq {
			helper.LockStatus()
		}
		if err := helper.Patch(ctx, img); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("patching MacOSImage %s: %w", req.Name, err))
		}
	}()

	resolveErr := r.resolve(ctx, s)
	if err := r.countReplicas(s); err != nil {
		return ctrl.Result{}, errors.Join(resolveErr, err)
	}
	// A registry that did not answer is retried with the controller's
	// backoff; a refused artifact is not, its digest pins it.
	return ctrl.Result{}, resolveErr
}
