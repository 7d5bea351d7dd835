// Package placement places a lease's instances on its chassis. It reconciles
// one MacNode at a time: it frees the slots of instances that no longer
// exist, claims a slot in MacNode.status.slots for each waiting instance of
// the bound lease (optimistic concurrency; at most the class's capacity,
// never more than two), asks the policies before each placement, then sets
// the instance's status.nodeName. A chassis under quarantine (Quarantined,
// Rebooting, or with an active status.quarantine) takes no new claim: its
// waiting instances stay unplaced and say why, and its slots stay. The
// slots are instance.cap's count; an instance's Pod (internal/reconcile/pod)
// is a view of it.
//
// Files by concern: controller (wiring and the pass), slots (the
// observations and the claims), instances (the instances' writes), status
// (each instance's placement and Placed condition, set in one place).
package placement

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/patch"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/intent"
)

// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=compute.macrack.io,resources=macosinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=compute.macrack.io,resources=macosinstances/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=leasing.macrack.io,resources=macnodeleases,verbs=get;list;watch

// ReasonChassisQuarantined is the Placed=False reason of an instance that
// waits because its chassis is under quarantine (the compute API has no
// reason of its own for it yet; the lease's ChassisAvailable uses the same).
const ReasonChassisQuarantined = leasingv1alpha1.ReasonChassisQuarantined

// FieldOwner is placement's field manager. Each controller writes under its
// own, so that managedFields, and the writes suite's one-writer test, tell a
// status' owners apart.
const FieldOwner = "macrack-placement"

// Reconciler places instances on one MacNode at a time.
type Reconciler struct {
	// Checker is the reconciler's client and clock, and what it needs to
	// ask the policies about a status write before it makes it
	// (Checker.StatusWrite): the engine, the params, the operator's
	// identity, and the audit stream's denials.
	intent.Checker
	Recorder events.EventRecorder
	// MaxConcurrentReconciles bounds parallel reconciles, each of one
	// chassis and its slots.
	MaxConcurrentReconciles int

	// placedOn holds, per instance UID, the chassis its placement was
	// applied for, until the cache shows it: a pass on an older read would
	// place it again.
	placedOn sync.Map
}

// SetupWithManager registers the controller and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1alpha1.MacNode{}).
		Named("placement").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Watches(&computev1alpha1.MacOSInstance{}, handler.EnqueueRequestsFromMapFunc(r.nodeOfInstance)).
		Complete(conflict.Quiet(r))
}

// nodeOfInstance maps an instance to the chassis it is on, or, unplaced, to
// the chassis its lease holds.
func (r *Reconciler) nodeOfInstance(ctx context.Context, obj client.Object) []reconcile.Request {
	i := obj.(*computev1alpha1.MacOSInstance)
	if i.Status.NodeName != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: i.Status.NodeName}}}
	}
	l := &leasingv1alpha1.MacNodeLease{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: i.Namespace, Name: i.Spec.LeaseName}, l); err != nil || l.Status.NodeName == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: l.Status.NodeName}}}
}

// scope carries one pass's observations and decisions to the writes.
type scope struct {
	node *fleetv1alpha1.MacNode
	now  metav1.Time
	// fence says why the chassis takes no new claim; "" when it is not
	// under quarantine.
	fence string
	// placed are the instances on the chassis that still hold a VM or a
	// disk; waiting, the bound lease's instances not placed yet.
	placed, waiting []computev1alpha1.MacOSInstance
	// slotsClaimed: the pass changed the MacNode's slots.
	slotsClaimed bool
	// claims are the waiting instances that hold a slot, to be placed.
	claims []computev1alpha1.MacOSInstance
	// refused are the waiting instances that get no slot, and why.
	refused []refusal
	// updates are the waiting instances' statuses as updateStatus leaves
	// them, for the writes.
	updates []instanceUpdate
}

// refusal is a waiting instance that gets no slot on this pass, and why.
type refusal struct {
	inst            computev1alpha1.MacOSInstance
	reason, message string
}

// Reconcile frees dead slots and places waiting instances, on the lease
// controller's skeleton: the phases only observe and decide, and the
// writes come once, at the end, each object patched at most once. The
// MacNode's slots go first: an instance is placed only on a slot its
// chassis holds (optimistic concurrency: of two writers of the slots, the
// second fails and the pass is retried against the new ones). Placement
// adds no finalizer: the MacNode is the node controller's, and a slot
// goes with its chassis.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	mn := &fleetv1alpha1.MacNode{}
	if err := r.Client.Get(ctx, req.NamespacedName, mn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &scope{node: mn, now: metav1.NewTime(r.Clock.Now())}
	helper := patch.NewHelper(mn, r.Client)
	helper.LockStatus()
	defer func() {
		if retErr != nil {
			// A pass that failed judged some waiting instances and not
			// others (a cache error is retried, and is never a tenant's
			// capacity verdict): it writes nothing.
			return
		}
		r.updateStatus(s)
		if err := r.write(ctx, s, helper); err != nil {
			if apierrors.IsConflict(err) {
				res, retErr = ctrl.Result{RequeueAfter: conflict.RetryAfter}, nil
				return
			}
			retErr = err
		}
	}()
	return ctrl.Result{}, r.reconcileSlots(ctx, s)
}

// write writes the pass: the MacNode's slots, then each instance whose
// placement or Placed condition changed.
func (r *Reconciler) write(ctx context.Context, s *scope, helper *patch.Helper) error {
	if err := helper.Patch(ctx, s.node); err != nil {
		return fmt.Errorf("claiming slots on %s: %w", s.node.Name, err)
	}
	if s.slotsClaimed {
		ctrl.LoggerFrom(ctx).Info("Slots claimed", "MacNode", s.node.Name, "slots", len(s.node.Status.Slots))
	}
	return r.patchInstances(ctx, s)
}
