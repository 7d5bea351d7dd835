// Package pod keeps each placed MacOSInstance's Pod: one Pod in the
// tenant's namespace, named after the instance and controlled by it, bound
// to the chassis' Node, so that kubectl, k9s and the dashboards show the
// VMs. The Pod is a view and a handle, never a count: instance.cap counts
// the chassis' slots (internal/reconcile/placement). The operator owns the
// Pod, spec and status; no kubelet runs it, and the host agent reads and
// writes no Pod.
//
// A Pod is matched to its instance by its controller reference, never by
// its labels, which a tenant can forge in its own namespace. A deleted Pod
// changes nothing about the VM: the operator force-deletes one left
// Terminating (no kubelet would finish it) and makes it again, unless the
// instance itself is being deleted.
package pod

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/chassis"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/patch"
)

// The operator creates and deletes instances' Pods and writes their
// status; it never updates or patches a Pod's spec or metadata (a Pod that
// drifted is deleted and made again). The pod-shape admission policy pins
// what it may create.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=compute.macrack.io,resources=macosinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=compute.macrack.io,resources=macosinstances/status,verbs=get;update;patch

// RefusedRetry is how soon a Pod that admission refused is tried again:
// nothing the operator watches says when a quota or a namespace's
// PodSecurity level changes.
const RefusedRetry = time.Minute

// FieldOwner is the instance Pod controller's field manager. Each controller
// writes under its own, so that managedFields, and the writes suite's one-writer
// test, tell a status' owners apart.
const FieldOwner = "macrack-pod"

// Reconciler keeps instances' Pods.
type Reconciler struct {
	// Client reads from the cache, which holds only Pods labelled
	// fleetv1alpha1.InstancePodLabel.
	Client client.Client
	// APIReader reads a Pod the cache cannot show: one that holds the
	// instance's name but lost the label.
	APIReader client.Reader
	Clock     clock.PassiveClock
	Recorder  events.EventRecorder
	// MaxConcurrentReconciles bounds parallel reconciles.
	MaxConcurrentReconciles int

	// applied holds, per instance UID, the Pod condition last applied,
	// until the cache shows it: a pass on a cache that has not seen the
	// write would apply it again, with a later transition time.
	applied sync.Map
}

// SetupWithManager registers the controller and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&computev1alpha1.MacOSInstance{}).
		Named("instancepod").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		// By the controller reference alone: a Pod names its instance by
		// that, whatever its labels say.
		Owns(&corev1.Pod{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.instancesOnNode),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
				return nodeReady(e.ObjectOld.(*corev1.Node)) != nodeReady(e.ObjectNew.(*corev1.Node))
			}})).
		Watches(&fleetv1alpha1.MacNode{}, handler.EnqueueRequestsFromMapFunc(instancesInSlots)).
		Complete(conflict.Quiet(r))
}

// instancesOnNode maps a Node to the instances placed on it.
func (r *Reconciler) instancesOnNode(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &computev1alpha1.MacOSInstanceList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index.InstanceByNode: obj.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the instances on a Node failed", "Node", obj.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// instancesInSlots maps a MacNode to the instances its slots name: a slot
// claimed or dropped makes a Pod due or not.
func instancesInSlots(_ context.Context, obj client.Object) []reconcile.Request {
	slots := obj.(*fleetv1alpha1.MacNode).Status.Slots
	reqs := make([]reconcile.Request, 0, len(slots))
	for _, s := range slots {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: s.Namespace, Name: s.Name}})
	}
	return reqs
}

// scope carries one reconcile's observations to the status computation.
type scope struct {
	inst *computev1alpha1.MacOSInstance
	now  time.Time
	// placed: the instance is on a chassis, in one of its slots.
	placed bool
	// node is the chassis' Node; nil until the agent registered it.
	node *corev1.Node
	// pod is the instance's Pod, controlled by it; nil if there is none.
	pod *corev1.Pod
	// taken: a Pod the instance does not control holds its name.
	taken string
	// refused is admission's answer to this pass's create, if it refused.
	refused string
	// replacing: this pass deleted the Pod, to make it again.
	replacing bool
}

// Reconcile keeps one instance's Pod.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	inst := &computev1alpha1.MacOSInstance{}
	if err := r.Client.Get(ctx, req.NamespacedName, inst); err != nil {
		// Gone: the garbage collector takes its Pod, which it deletes at
		// once (a grace period of 0 in the Pod's spec).
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if gone(inst) {
		r.applied.Delete(inst.UID)
	}
	s := &scope{inst: inst, now: r.Clock.Now()}
	if err := r.observe(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if gone(inst) {
		return ctrl.Result{}, r.deletePod(ctx, s, "the instance is deleted and its disk wiped")
	}
	before := meta.FindStatusCondition(inst.Status.Conditions, computev1alpha1.ConditionPod)
	if before != nil {
		before = before.DeepCopy()
	}
	defer func() {
		r.updateStatus(s)
		// The Pod condition alone, by server-side apply: the instance's
		// other writers (placement's Placed, the exporter's journal, the
		// agent's runtime) own the rest of its status, and neither refuses
		// this write nor loses theirs to it.
		after := meta.FindStatusCondition(inst.Status.Conditions, computev1alpha1.ConditionPod)
		if w, ok := r.applied.Load(inst.UID); ok && before != nil && sameCondition(*before, w.(metav1.Condition)) {
			r.applied.Delete(inst.UID) // the cache caught up
		}
		if after == nil || (before != nil && equality.Semantic.DeepEqual(*before, *after)) {
			return
		}
		if before != nil && !inst.DeletionTimestamp.IsZero() && sameCondition(*before, restamped(*after, before.ObservedGeneration)) {
			// The delete raised the generation, and nothing else moved: a
			// deleting instance's conditions stay at the generation they
			// spoke of, as placement's Placed does (issue 39). One waits for
			// a deleted instance with --for=delete, not for its conditions.
			return
		}
		if w, ok := r.applied.Load(inst.UID); ok && sameCondition(*after, w.(metav1.Condition)) {
			return // written; the cache has not shown it yet
		}
		if err := patch.ApplyStatus(ctx, r.Client, inst, FieldOwner, map[string]any{"conditions": []metav1.Condition{*after}}); err != nil {
			retErr = errors.Join(retErr, client.IgnoreNotFound(fmt.Errorf("patching MacOSInstance %s: %w", req, err)))
			return
		}
		r.applied.Store(inst.UID, *after)
	}()
	res, err := r.reconcilePod(ctx, s)
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflict.RetryAfter}, nil
	}
	return res, err
}

// restamped is c at generation g.
func restamped(c metav1.Condition, g int64) metav1.Condition {
	c.ObservedGeneration = g
	return c
}

// sameCondition: a and b say the same, at the same generation, whatever
// their transition times.
func sameCondition(a, b metav1.Condition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message && a.ObservedGeneration == b.ObservedGeneration
}

// gone: a deleted instance whose agent has wiped it holds no VM; it may
// linger, held by its audit finalizer, but with no Pod. Its Pod goes as
// soon as the wipe is on record, with the stop (the agent writes the two
// at once), not when the agent's finalizer comes off moments later:
// mirrored first, it would be written Succeeded, a write nobody reads on a
// Pod about to go (issue 39). A deleted instance whose VM stopped but whose
// wipe waits still has its Pod, which shows it stopped.
func gone(i *computev1alpha1.MacOSInstance) bool {
	if i.DeletionTimestamp.IsZero() {
		return false
	}
	return !chassis.AwaitsWipe(i)
}

// observe reads the instance's chassis, Node and Pod.
func (r *Reconciler) observe(ctx context.Context, s *scope) error {
	name := s.inst.Status.NodeName
	if name != "" {
		mn := &fleetv1alpha1.MacNode{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, mn); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("getting MacNode %s: %w", name, err)
		} else if err == nil {
			s.placed = hasSlot(mn, s.inst)
		}
		n := &corev1.Node{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, n); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("getting Node %s: %w", name, err)
		} else if err == nil {
			s.node = n
		}
	}
	p := &corev1.Pod{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(s.inst), p); err != nil {
		return client.IgnoreNotFound(err)
	}
	if controlledBy(p, s.inst) {
		s.pod = p
	} else {
		s.taken = takenMessage(p)
	}
	return nil
}

// reconcilePod creates the Pod, replaces one that is going or drifted, and
// mirrors the instance into its status.
func (r *Reconciler) reconcilePod(ctx context.Context, s *scope) (ctrl.Result, error) {
	deleting := !s.inst.DeletionTimestamp.IsZero()
	switch {
	case s.taken != "":
		return ctrl.Result{}, nil
	case !s.placed:
		return ctrl.Result{}, r.deletePod(ctx, s, "the instance holds no slot on a chassis")
	case s.pod != nil && !s.pod.DeletionTimestamp.IsZero():
		// No kubelet finishes a graceful deletion here.
		return ctrl.Result{}, r.replacePod(ctx, s, "it was deleted, and the VM runs on")
	case s.pod != nil && drifted(s.pod, s.inst):
		return ctrl.Result{}, r.replacePod(ctx, s, "its labels or node were changed")
	case s.pod != nil && terminal(s.pod.Status.Phase) && !terminal(podPhase(s.inst)):
		// The API server lets no Pod leave Succeeded or Failed.
		return ctrl.Result{}, r.replacePod(ctx, s, "the VM runs again after it stopped")
	case s.pod != nil:
		return ctrl.Result{}, r.mirror(ctx, s)
	case deleting:
		return ctrl.Result{}, nil // never a new Pod for an instance on its way out
	}
	return r.createPod(ctx, s)
}

func (r *Reconciler) createPod(ctx context.Context, s *scope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	p := desiredPod(s.inst)
	err := r.Client.Create(ctx, p)
	switch {
	case err == nil:
		s.pod = p
		log.Info("Pod created", "Pod", klog.KObj(p), "node", p.Spec.NodeName)
		r.Recorder.Eventf(s.inst, p, corev1.EventTypeNormal, "PodCreated", "CreatePod", "Created Pod %s on Node %s", p.Name, p.Spec.NodeName)
		return ctrl.Result{}, r.mirror(ctx, s)
	case apierrors.IsAlreadyExists(err):
		return r.nameHeld(ctx, s)
	case refusal(err):
		s.refused = err.Error()
		log.Info("Pod refused", "Pod", klog.KObj(p), "error", err.Error())
		return ctrl.Result{RequeueAfter: RefusedRetry}, nil
	}
	return ctrl.Result{}, fmt.Errorf("creating Pod %s: %w", klog.KObj(p), err)
}

// nameHeld reads the Pod that holds the instance's name past the cache:
// the instance's own, stripped of its label, is made again; another's is
// left alone, and said.
func (r *Reconciler) nameHeld(ctx context.Context, s *scope) (ctrl.Result, error) {
	p := &corev1.Pod{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.inst), p); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: conflict.RetryAfter}, nil // gone in between
		}
		return ctrl.Result{}, fmt.Errorf("reading Pod %s: %w", klog.KObj(s.inst), err)
	}
	if !controlledBy(p, s.inst) {
		s.taken = takenMessage(p)
		return ctrl.Result{}, nil
	}
	s.pod = p
	// A Pod stripped of its label is outside the cache's selection, so its
	// deletion enqueues nothing: look again at once rather than at the
	// instance's next write.
	return ctrl.Result{RequeueAfter: conflict.RetryAfter}, r.replacePod(ctx, s, "its labels were changed")
}

// replacePod deletes the instance's Pod at once, to be made again on the
// next pass (its deletion enqueues the instance).
func (r *Reconciler) replacePod(ctx context.Context, s *scope, why string) error {
	if err := r.deletePod(ctx, s, why); err != nil {
		return err
	}
	s.replacing = true
	r.Recorder.Eventf(s.inst, nil, corev1.EventTypeNormal, "PodReplaced", "ReplacePod", "Pod %s is made again: %s", s.inst.Name, why)
	return nil
}

// deletePod deletes the instance's own Pod, if it has one, with a grace
// period of 0 and the Pod's UID as a precondition: never another's Pod of
// the same name.
func (r *Reconciler) deletePod(ctx context.Context, s *scope, why string) error {
	p := s.pod
	if p == nil {
		return nil
	}
	if g := p.DeletionGracePeriodSeconds; p.DeletionTimestamp != nil && g != nil && *g == 0 {
		return nil // going at once already
	}
	uid := p.UID
	if err := r.Client.Delete(ctx, p, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		if apierrors.IsConflict(err) {
			return nil // another Pod holds the name now; the next pass sees it
		}
		return fmt.Errorf("deleting Pod %s: %w", klog.KObj(p), err)
	}
	ctrl.LoggerFrom(ctx).Info("Pod deleted", "Pod", klog.KObj(p), "reason", why)
	s.pod = nil
	return nil
}

// refusal: an admission plugin or webhook refused the Pod. The tenant's
// namespace decides; it is said on the instance, and never an error of the
// operator's.
func refusal(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// controlledBy: the Pod's controller reference names this instance, by UID.
func controlledBy(p *corev1.Pod, inst *computev1alpha1.MacOSInstance) bool {
	ref := metav1.GetControllerOfNoCopy(p)
	return ref != nil && ref.UID == inst.UID && ref.Kind == "MacOSInstance" &&
		ref.APIVersion == computev1alpha1.GroupVersion.String() && ref.Name == inst.Name
}

func takenMessage(p *corev1.Pod) string {
	return fmt.Sprintf("Pod %s, which this instance does not control, holds its name; the instance has no Pod until it is gone (the VM is unaffected)", p.Name)
}

func hasSlot(mn *fleetv1alpha1.MacNode, inst *computev1alpha1.MacOSInstance) bool {
	for _, s := range mn.Status.Slots {
		if s.UID == inst.UID {
			return true
		}
	}
	return false
}
