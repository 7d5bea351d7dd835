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
package placement

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/patch"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/intent"
)

// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=compute.macrack.io,resources=macosinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=compute.macrack.io,resources=macosinstances/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=leasing.macrack.io,resources=macnodeleases,verbs=get;list;watch

// conflictRetry is how soon a slot claim that lost an optimistic concurrency
// race is retried, from a fresher read.
const conflictRetry = 100 * time.Millisecond

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
	Client   client.Client
	Engine   *policy.Engine
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
	Params   policy.Params
	Identity string
	// Denials takes the policies' refusals of this controller's writes,
	// for the audit stream; may be nil.
	Denials *audit.Denials
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

// Reconcile frees dead slots and places waiting instances.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mn := &fleetv1alpha1.MacNode{}
	if err := r.Client.Get(ctx, req.NamespacedName, mn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	placed := &computev1alpha1.MacOSInstanceList{}
	if err := r.Client.List(ctx, placed, client.MatchingFields{index.InstanceByNode: mn.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing instances on %s: %w", mn.Name, err)
	}
	placed.Items = slices.DeleteFunc(placed.Items, gone)
	var waiting []computev1alpha1.MacOSInstance
	fence := quarantineFence(mn)
	if b := mn.Status.Binding; b != nil && (mn.Status.Phase == fleetv1alpha1.MacNodeLeased || fence != "") {
		ofLease := &computev1alpha1.MacOSInstanceList{}
		if err := r.Client.List(ctx, ofLease, client.InNamespace(b.LeaseNamespace),
			client.MatchingFields{index.InstanceByLease: index.LeaseKey(b.LeaseNamespace, b.LeaseName)}); err != nil {
			return ctrl.Result{}, fmt.Errorf("listing instances of %s/%s: %w", b.LeaseNamespace, b.LeaseName, err)
		}
		for _, i := range ofLease.Items {
			if i.Status.NodeName == "" && i.DeletionTimestamp.IsZero() {
				waiting = append(waiting, i)
			}
		}
	}
	if err := r.reconcileSlots(ctx, mn, placed.Items, waiting, fence); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// gone: a deleted instance whose agent has wiped it holds no VM and no
// disk. It may linger, held by its audit finalizer until its last records
// are out, but on no slot.
func gone(i computev1alpha1.MacOSInstance) bool {
	return !i.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(&i, fleetv1alpha1.DiskWipeFinalizer)
}

// reconcileSlots writes the MacNode's slots once: live slots kept, dead
// ones dropped, new claims added; then it places the claimed instances.
// With a fence (the chassis is under quarantine), it claims nothing: each
// waiting instance without a slot is told why it waits.
func (r *Reconciler) reconcileSlots(ctx context.Context, mn *fleetv1alpha1.MacNode, placed, waiting []computev1alpha1.MacOSInstance, fence string) error {
	log := ctrl.LoggerFrom(ctx)
	exists := map[types.UID]bool{}
	for _, i := range placed {
		exists[i.UID] = true
		r.placedOn.Delete(i.UID) // the cache shows it placed
	}
	for _, i := range waiting {
		exists[i.UID] = true
	}
	var slots []fleetv1alpha1.Slot
	for _, s := range mn.Status.Slots {
		if exists[s.UID] {
			slots = append(slots, s)
		}
	}
	hasSlot := map[types.UID]bool{}
	for _, s := range slots {
		hasSlot[s.UID] = true
	}

	capacity, classKnown, err := r.capacity(ctx, mn)
	if err != nil {
		// A cache error is retried; it is never a tenant's capacity verdict.
		return err
	}
	sort.SliceStable(waiting, func(a, b int) bool {
		return waiting[a].CreationTimestamp.Before(&waiting[b].CreationTimestamp)
	})
	var claims []computev1alpha1.MacOSInstance
	var refused []refusal
	for _, inst := range waiting {
		if hasSlot[inst.UID] {
			claims = append(claims, inst) // claimed on an earlier pass; the placement was not written yet
			continue
		}
		if fence != "" {
			refused = append(refused, refusal{inst, ReasonChassisQuarantined, fence})
			continue
		}
		if !classKnown {
			refused = append(refused, refusal{inst, computev1alpha1.ReasonClassNotFound,
				fmt.Sprintf("chassis %s names MacNodeClass %s, which does not exist; nothing is placed on it", mn.Spec.Serial, mn.Spec.NodeClassName)})
			continue
		}
		if len(slots) >= capacity {
			refused = append(refused, refusal{inst, computev1alpha1.ReasonCapacityExceeded,
				fmt.Sprintf("chassis %s runs at most %d macOS VMs and all its slots are taken", mn.Spec.Serial, capacity)})
			continue
		}
		if msg, err := r.mayPlace(ctx, mn, &inst); err != nil {
			return err
		} else if msg != "" {
			refused = append(refused, refusal{inst, computev1alpha1.ReasonPolicyDenied, msg})
			continue
		}
		slots = append(slots, fleetv1alpha1.Slot{Namespace: inst.Namespace, Name: inst.Name, UID: inst.UID})
		hasSlot[inst.UID] = true
		claims = append(claims, inst)
	}

	if !sameSlots(slots, mn.Status.Slots) {
		updated := mn.DeepCopy()
		updated.Status.Slots = slots
		d, err := r.decide(ctx, updated, mn, nil)
		if err != nil {
			return err
		}
		if !d.Allowed() {
			return fmt.Errorf("claiming slots on %s refused: %s", mn.Name, d.Violations[0].Message)
		}
		// A full update with the read resourceVersion: of two writers, the
		// second fails and retries against the new slots.
		if err := r.Client.Status().Update(ctx, updated); err != nil {
			return fmt.Errorf("claiming slots on %s: %w", mn.Name, err)
		}
		log.Info("Slots claimed", "MacNode", mn.Name, "slots", len(slots))
	}

	for i := range claims {
		if err := r.place(ctx, mn, &claims[i]); err != nil {
			return err
		}
	}
	for _, ref := range refused {
		if err := r.setPlaced(ctx, &ref.inst, conditions.False(computev1alpha1.ConditionPlaced, ref.reason, ref.message)); err != nil {
			return err
		}
	}
	return nil
}

type refusal struct {
	inst            computev1alpha1.MacOSInstance
	reason, message string
}

// quarantineFence says why a chassis takes no new instance, as
// quarantine.fence says it at admission, or is "" for a chassis that is not
// under quarantine: Quarantined, Rebooting, or with a quarantine that has
// not recovered.
func quarantineFence(mn *fleetv1alpha1.MacNode) string {
	q := mn.Status.Quarantine
	state := string(mn.Status.Phase)
	switch {
	case mn.Status.Phase.Fenced():
	case q.Active():
		state = fmt.Sprintf("under quarantine (phase %s)", orPending(mn.Status.Phase))
	default:
		return ""
	}
	cause := "its kernel VM quota stuck and MacRack is rebooting it"
	if q != nil && q.NeedsAttention {
		cause = fmt.Sprintf("its kernel VM quota stuck more than %d times in 24 hours and it waits for a person to repair it", fleetv1alpha1.MaxQuarantinesPerDay)
	}
	return fmt.Sprintf("quarantine.fence: chassis %s is %s: %s; no slot is claimed on it until it recovers, and this instance waits unplaced until then",
		mn.Spec.Serial, state, cause)
}

func orPending(p fleetv1alpha1.MacNodePhase) fleetv1alpha1.MacNodePhase {
	if p == "" {
		return fleetv1alpha1.MacNodePending
	}
	return p
}

// mayPlace asks instance.cap and instance.tenant about the placement.
func (r *Reconciler) mayPlace(ctx context.Context, mn *fleetv1alpha1.MacNode, inst *computev1alpha1.MacOSInstance) (string, error) {
	to := inst.DeepCopy()
	to.Status.NodeName = mn.Name
	d, err := r.decide(ctx, to, inst, nil)
	if err != nil || d.Allowed() {
		return "", err
	}
	msgs := make([]string, len(d.Violations))
	for i, v := range d.Violations {
		msgs[i] = v.Message
	}
	return strings.Join(msgs, "; "), nil
}

// place sets status.nodeName and Placed=True on an instance holding a slot.
func (r *Reconciler) place(ctx context.Context, mn *fleetv1alpha1.MacNode, inst *computev1alpha1.MacOSInstance) error {
	if on, ok := r.placedOn.Load(inst.UID); ok && on == mn.Name {
		return nil // placed; the cache has not shown it yet
	}
	inst.Status.NodeName = mn.Name
	conditions.Set(&inst.Status.Conditions, conditions.True(computev1alpha1.ConditionPlaced, computev1alpha1.ReasonPlaced,
		fmt.Sprintf("a slot on chassis %s (%s) is this instance's", mn.Spec.Serial, mn.Name)), inst.Generation, metav1.NewTime(r.Clock.Now()))
	// Its own fields alone, applied: the instance's other writers (the
	// exporter's journal and finalizer, in the same moments) do not refuse
	// it, and the slot it names is already claimed on the chassis.
	placed := map[string]any{"nodeName": mn.Name, "conditions": []metav1.Condition{*meta.FindStatusCondition(inst.Status.Conditions, computev1alpha1.ConditionPlaced)}}
	if err := patch.ApplyStatus(ctx, r.Client, inst, FieldOwner, placed); err != nil {
		return fmt.Errorf("placing %s/%s on %s: %w", inst.Namespace, inst.Name, mn.Name, err)
	}
	r.placedOn.Store(inst.UID, mn.Name)
	r.Recorder.Eventf(inst, mn, corev1.EventTypeNormal, "Placed", "Place", "Placed on chassis %s (%s)", mn.Spec.Serial, mn.Name)
	return nil
}

func (r *Reconciler) setPlaced(ctx context.Context, inst *computev1alpha1.MacOSInstance, c metav1.Condition) error {
	before := inst.DeepCopy()
	if !conditions.Set(&inst.Status.Conditions, c, inst.Generation, metav1.NewTime(r.Clock.Now())) &&
		before.Status.Conditions != nil && conditionMessage(before, c.Type) == c.Message {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, inst, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.Recorder.Eventf(inst, nil, corev1.EventTypeWarning, c.Reason, "Place", "%s", c.Message)
	return nil
}

func conditionMessage(i *computev1alpha1.MacOSInstance, t string) string {
	for _, c := range i.Status.Conditions {
		if c.Type == t {
			return c.Message
		}
	}
	return ""
}

// capacity is the class's vmCapacity, never above two.
// capacity is the chassis' VM capacity: its class's, never above the
// kernel's two. known is false when the class does not exist, which places
// nothing; any other error is the caller's to retry.
func (r *Reconciler) capacity(ctx context.Context, mn *fleetv1alpha1.MacNode) (capacity int, known bool, err error) {
	class := &fleetv1alpha1.MacNodeClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: mn.Spec.NodeClassName}, class); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("getting MacNodeClass %s of %s: %w", mn.Spec.NodeClassName, mn.Name, err)
	}
	return min(int(class.Spec.VMCapacity), fleetv1alpha1.KernelVMLimit), true, nil
}

func (r *Reconciler) decide(ctx context.Context, obj, old client.Object, inv map[string]any) (policy.Decision, error) {
	return intent.Checker{Client: r.Client, Engine: r.Engine, Clock: r.Clock, Params: r.Params, Identity: r.Identity, Denials: r.Denials}.StatusWrite(ctx, obj, old, inv)
}

func sameSlots(a, b []fleetv1alpha1.Slot) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
