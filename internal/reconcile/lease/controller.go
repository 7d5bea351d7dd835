// Package lease reconciles MacNodeLeases: it binds a free chassis of the
// class, keeps a lease deleted before earliestReleaseAt in Held, and releases
// the chassis, once every instance is wiped, at or after earliestReleaseAt.
// It asks internal/policy before it binds or releases.
package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/journal"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/finalizer"
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/patch"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/intent"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/requeue"
)

// +kubebuilder:rbac:groups=leasing.macrack.io,resources=macnodeleases,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=leasing.macrack.io,resources=macnodeleases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=leasing.macrack.io,resources=macnodeleases/finalizers,verbs=update
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodeclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=compute.macrack.io,resources=macosinstances,verbs=get;list;watch;delete

// FieldOwner is the lease controller's field manager. Each controller writes
// under its own, so that managedFields, and the writes suite's one-writer
// test, tell a status' owners apart.
const FieldOwner = "macrack-lease"

// Reconciler reconciles MacNodeLeases.
type Reconciler struct {
	// Checker is the reconciler's client and clock, and what it needs to
	// ask the policies about a status write before it makes it
	// (Checker.StatusWrite): the engine, the params, the operator's
	// identity, and the audit stream's denials.
	intent.Checker
	Recorder events.EventRecorder
	// Ticks, if set, enqueues leases from outside the cluster: tests step a
	// fake clock and send the leases whose time has come.
	Ticks <-chan event.GenericEvent
	// MaxConcurrentReconciles bounds parallel reconciles.
	MaxConcurrentReconciles int
	// JournalDropped counts audit records a full journal lost; may be nil.
	JournalDropped func(n int)
	// ClassSize counts the chassis of each class (NewClassSize), fed by
	// the MacNode informer: a lease that finds none free says how many the
	// class has by one lookup, not a list of the class. SetupWithManager
	// makes and feeds one if nil.
	ClassSize *index.Count

	// claims are this reconciler's chassis claims its cache has not shown yet.
	claims claims
}

// NewClassSize is the count of chassis by class that Reconciler's
// ClassSize holds: a Count of MacNodes by index.NodeClass.
func NewClassSize() *index.Count { return index.NewCount(index.NodeClass) }

// SetupWithManager registers the controller and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.ClassSize == nil {
		r.ClassSize = NewClassSize()
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&leasingv1alpha1.MacNodeLease{}).
		Named("macnodelease").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Watches(&fleetv1alpha1.MacNode{}, handler.EnqueueRequestsFromMapFunc(r.leasesForMacNode)).
		Watches(&computev1alpha1.MacOSInstance{}, r.instanceHandler()).
		// The MacNode watch above enqueues what a class' size concerns.
		WatchesRawSource(r.ClassSize.Source(mgr.GetCache(), &fleetv1alpha1.MacNode{}, "MacNodes by class", nil))
	if r.Ticks != nil {
		b = b.WatchesRawSource(source.Channel(r.Ticks, handler.EnqueueRequestsFromMapFunc(r.ticked)))
	}
	return b.Complete(conflict.Quiet(r))
}

// leasesForMacNode maps a MacNode to the lease that holds it, or, when it
// is free, to every unbound lease of its class.
func (r *Reconciler) leasesForMacNode(ctx context.Context, obj client.Object) []reconcile.Request {
	n := obj.(*fleetv1alpha1.MacNode)
	if b := n.Status.Binding; b != nil {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: b.LeaseNamespace, Name: b.LeaseName}}}
	}
	leases := &leasingv1alpha1.MacNodeLeaseList{}
	// Read, not copied: only the keys of the unbound ones are kept.
	if err := r.Client.List(ctx, leases, client.MatchingFields{index.LeaseByClass: n.Spec.NodeClassName}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing leases of a class failed", "MacNodeClass", n.Spec.NodeClassName)
		return nil
	}
	var reqs []reconcile.Request
	for _, l := range leases.Items {
		if l.Status.Phase == "" || l.Status.Phase == leasingv1alpha1.LeasePending {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&l)})
		}
	}
	return reqs
}

// ticked maps a tick to the leases it concerns: a lease to itself, a
// MacNode as its watch does (the binding's lease key, which may name a
// lease that is gone).
func (r *Reconciler) ticked(ctx context.Context, obj client.Object) []reconcile.Request {
	if n, ok := obj.(*fleetv1alpha1.MacNode); ok {
		return r.leasesForMacNode(ctx, n)
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(obj)}}
}

func leaseOfInstance(_ context.Context, obj client.Object) []reconcile.Request {
	i := obj.(*computev1alpha1.MacOSInstance)
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: i.Namespace, Name: i.Spec.LeaseName}}}
}

// scope carries one reconcile's observations to the status computation.
type scope struct {
	lease *leasingv1alpha1.MacNodeLease
	now   time.Time
	// node is the MacNode whose binding names this lease; authoritative.
	node *fleetv1alpha1.MacNode
	// released: the chassis went back to the pool on this pass.
	released bool
	// pendingReason and pendingMessage say why an unbound lease waits.
	pendingReason, pendingMessage string
	// awaiting counts instances still waiting for their disk wipe.
	awaiting int
	// slots counts the slots placement has yet to free on the chassis: the
	// binding is cleared only once they are.
	slots int
	// holds says what the chassis still holds, by its agent's report, when
	// that is what keeps it from the pool.
	holds string
	// retired: the chassis released on this pass is retired, and was let go
	// without its disks wiped.
	retired bool
	// refusal is a policy's answer to this pass's release, if it refused.
	refusal string
	// awaitingRecovery: the release waits for the chassis to come back from
	// its quarantine.
	awaitingRecovery bool
}

// Reconcile moves one lease through Pending, Bound, Held and Released. The
// bindings are this controller's alone: it also releases those that still
// name the lease's key after a lease of that name went without its
// finalizer.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	lease := &leasingv1alpha1.MacNodeLease{}
	var live types.UID
	switch err := r.Client.Get(ctx, req.NamespacedName, lease); {
	case apierrors.IsNotFound(err):
		lease = nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("getting MacNodeLease %s: %w", req, err)
	default:
		live = lease.UID
	}
	orphans, orphanErr := r.releaseOrphans(ctx, req.NamespacedName, live)
	if lease == nil {
		return orphans, orphanErr
	}
	res, err := r.reconcileLease(ctx, req, lease)
	return requeue.Lowest(res, orphans), errors.Join(err, orphanErr)
}

// reconcileLease is one pass over a lease that exists.
func (r *Reconciler) reconcileLease(ctx context.Context, req ctrl.Request, lease *leasingv1alpha1.MacNodeLease) (res ctrl.Result, retErr error) {
	if lease.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(lease, fleetv1alpha1.LeaseFinalizer) {
		// A patch tested on the finalizers alone, not an update locked on
		// the whole lease: the reservations' status writes land in the
		// same moments.
		if err := finalizer.Add(ctx, r.Client, lease, fleetv1alpha1.LeaseFinalizer); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer to MacNodeLease %s: %w", req, err)
		}
	}

	s := &scope{lease: lease, now: r.Clock.Now()}
	var err error
	if s.node, err = r.boundNode(ctx, lease); err != nil {
		return ctrl.Result{}, err
	}
	if s.node != nil {
		r.claims.done(lease.UID)
	} else if node, ok := r.claims.pending(lease.UID, s.now); ok {
		// This reconciler claimed a chassis for the lease, and its cache has
		// not caught up: wait for it, rather than bind a second chassis or
		// let the lease go as never bound.
		ctrl.LoggerFrom(ctx).V(1).Info("Waiting for the cache to show this lease's claim", "MacNode", node)
		return ctrl.Result{RequeueAfter: conflict.RetryAfter}, nil
	}
	helper := patch.NewHelper(lease, r.Client)
	before := lease.Status.DeepCopy()
	defer func() {
		r.updateStatus(s)
		// As cluster-api's machine controller: the generation is observed
		// only by a pass that succeeded.
		if retErr == nil {
			lease.Status.ObservedGeneration = lease.Generation
		}
		r.journal(before, s, helper)
		if err := helper.Patch(ctx, lease); err != nil && !(s.released && apierrors.IsNotFound(err)) {
			if rule, refused := patch.Refusal(err); refused {
				r.statusWriteRefused(ctx, req, rule, err)
				// Never terminal: the pass is retried with the controller's
				// backoff, and the finalizer stays until the write goes.
				retErr = fmt.Errorf("patching MacNodeLease %s: %w", req, err)
				return
			}
			retErr = errors.Join(retErr, fmt.Errorf("patching MacNodeLease %s: %w", req, err))
		}
	}()

	if !lease.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

// statusWriteRefused makes a policy's refusal of this controller's status
// write seen: a metric with the rule id, a log line, and, on the stored
// lease, Recorded=False with an Event when it flips. Only the condition is
// written, so that the refused status times are not tried again here.
func (r *Reconciler) statusWriteRefused(ctx context.Context, req ctrl.Request, rule string, refusal error) {
	log := ctrl.LoggerFrom(ctx)
	patch.CountRefusal("MacNodeLease", rule)
	log.Error(refusal, "Status write refused by policy", "rule", rule)
	stored := &leasingv1alpha1.MacNodeLease{}
	if err := r.Client.Get(ctx, req.NamespacedName, stored); err != nil {
		return
	}
	before := stored.DeepCopy()
	msg := fmt.Sprintf("the operator's status write was refused by %s (a bug; the lease keeps its finalizer, and its records, until it is fixed): %v", rule, refusal)
	flipped := conditions.Set(&stored.Status.Conditions, conditions.False(leasingv1alpha1.ConditionRecorded,
		leasingv1alpha1.ReasonStatusWriteRefused, msg), stored.Generation, metav1.NewTime(r.Clock.Now()))
	if !flipped {
		return
	}
	if err := r.Client.Status().Patch(ctx, stored, client.MergeFrom(before)); err != nil {
		log.Error(err, "Recording a refused status write failed", "rule", rule)
	}
	r.Recorder.Eventf(stored, nil, corev1.EventTypeWarning, leasingv1alpha1.ReasonStatusWriteRefused, "Record", "%s", msg)
}

// journal records this pass's transitions in the same status write as the
// transitions themselves. That write is locked on the journal's sequence:
// a pass on a stale read must not
// number a transition with a sequence number already used, but the
// reservations' writes of the lease's status (issue 35), which land in the
// same moments, no longer refuse it as the resourceVersion did.
func (r *Reconciler) journal(before *leasingv1alpha1.MacNodeLeaseStatus, s *scope, helper *patch.Helper) {
	seq := s.lease.Status.Audit.Next()
	dropped := journal.Lease(before, s.lease, s.now)
	if dropped > 0 && r.JournalDropped != nil {
		r.JournalDropped(dropped)
	}
	if s.lease.Status.Audit.Next() == seq {
		return
	}
	switch {
	case before.Audit == nil:
		// The journal's first write: on condition that there is none.
		helper.LockStatusOn("/status/audit", nil)
	case seq == 0:
		helper.LockStatusOn("/status/audit/nextSequence", nil) // omitted when zero
	default:
		helper.LockStatusOn("/status/audit/nextSequence", seq)
	}
}

// boundNode finds the MacNode whose binding names this lease's UID.
func (r *Reconciler) boundNode(ctx context.Context, lease *leasingv1alpha1.MacNodeLease) (*fleetv1alpha1.MacNode, error) {
	nodes := &fleetv1alpha1.MacNodeList{}
	if err := r.Client.List(ctx, nodes, client.MatchingFields{index.MacNodeByLeaseUID: string(lease.UID)}); err != nil {
		return nil, fmt.Errorf("finding the MacNode bound to %s/%s: %w", lease.Namespace, lease.Name, err)
	}
	for i := range nodes.Items {
		if b := nodes.Items[i].Status.Binding; b != nil && b.LeaseUID == lease.UID {
			return &nodes.Items[i], nil
		}
	}
	return nil, nil
}
