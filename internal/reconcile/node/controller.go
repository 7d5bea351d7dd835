// Package node reconciles MacNodes: it moves a chassis through Pending,
// Enrolled and Ready from the facts its agent reports, as node.commercial and
// quota.never-circumvent decide; it runs the quarantine loop of a chassis
// whose kernel VM quota stuck; and it keeps the matching Node's macrack.io/
// taints and tenant label in step with the MacNode's binding and quarantine.
// Only the operator writes those.
//
// Files by concern: controller (wiring and the pass), phases (the
// observations and the one place the phase is derived), quarantine (the
// loop, and its conditions), node (the Node's taints and Ready), status
// (the MacNode's conditions), retired (the break-glass of a dead Mac).
package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
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
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/nodeready"
	"github.com/boualleiguie/macrack-operator/internal/patch"
	"github.com/boualleiguie/macrack-operator/internal/phase"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/intent"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/requeue"
)

// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodeclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=leasing.macrack.io,resources=macnodeleases,verbs=get;list;watch
// +kubebuilder:rbac:groups=compute.macrack.io,resources=macosinstances,verbs=get;list;watch;delete;patch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macosimages,verbs=get;list;watch

// FieldOwner is the node controller's field manager. Each controller writes
// under its own, so that managedFields, and the writes suite's one-writer
// test, tell a status' owners apart.
const FieldOwner = "macrack-node"

// Reconciler reconciles MacNodes and their Nodes.
type Reconciler struct {
	// Checker is the reconciler's client and clock, and what it needs to
	// ask the policies about a status write before it makes it
	// (Checker.StatusWrite): the engine, the params, the operator's
	// identity, and the audit stream's denials.
	intent.Checker
	Recorder events.EventRecorder
	// Ticks, if set, enqueues MacNodes from outside the cluster: tests step a
	// fake clock and send the MacNodes whose time has come.
	Ticks <-chan event.GenericEvent
	// HeartbeatGrace is how old the agent's heartbeat Lease may grow before
	// the chassis and its Node are marked not ready: the heartbeat interval
	// times the number of heartbeats that may be missed.
	HeartbeatGrace time.Duration
	// APIReader reads a heartbeat the cache shows too old once more from
	// the API server; nil trusts the cache.
	APIReader client.Reader
	// MaxConcurrentReconciles bounds parallel reconciles, each of one
	// chassis.
	MaxConcurrentReconciles int
	// Metrics counts quarantines and the chassis that need a person; nil
	// records none.
	Metrics *Metrics
	// JournalDropped counts audit records a full journal lost; may be nil.
	JournalDropped func(n int)

	// compliant is the chassis whose facts the policies last let enter
	// service (assessCompliance).
	compliant compliant
}

// SetupWithManager registers the controller and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1alpha1.MacNode{}).
		Named("macnode").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(macNodeOfNode)).
		Watches(&fleetv1alpha1.MacNodeClass{}, handler.EnqueueRequestsFromMapFunc(r.macNodesOfClass)).
		Watches(&leasingv1alpha1.MacNodeLease{}, handler.EnqueueRequestsFromMapFunc(macNodeOfLease)).
		Watches(&computev1alpha1.MacOSInstance{}, handler.EnqueueRequestsFromMapFunc(macNodeOfInstance)).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.macNodeOfHeartbeat))
	if r.Ticks != nil {
		b = b.WatchesRawSource(source.Channel(r.Ticks, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(conflict.Quiet(r))
}

// macNodeOfNode: a Node and its MacNode share a name.
func macNodeOfNode(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: obj.GetName()}}}
}

// macNodeOfHeartbeat: an agent's heartbeat Lease is named after its node.
// A renewal matters only to a chassis whose agent is not known to be
// ready, or whose Node is not Ready (kube-controller-manager's Unknown
// waits for a renewal after it): a ready one's reconcile is due anyway
// when its last heartbeat would grow too old (assessHeartbeat's requeue),
// and reads the newest renewal then. A fleet's heartbeats so cost one
// reconcile per chassis per grace, not one per beat.
func (r *Reconciler) macNodeOfHeartbeat(ctx context.Context, obj client.Object) []reconcile.Request {
	if obj.GetNamespace() != fleetv1alpha1.HeartbeatNamespace {
		return nil
	}
	key := types.NamespacedName{Name: obj.GetName()}
	mn, n := &fleetv1alpha1.MacNode{}, &corev1.Node{}
	if r.HeartbeatGrace > 0 && r.Client.Get(ctx, key, mn) == nil && conditions.IsTrue(mn.Status.Conditions, fleetv1alpha1.ConditionAgentReady) &&
		r.Client.Get(ctx, key, n) == nil && nodeready.IsTrue(n.Status.Conditions) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// macNodeOfLease: a lease's going may orphan its chassis' binding.
func macNodeOfLease(_ context.Context, obj client.Object) []reconcile.Request {
	if n := obj.(*leasingv1alpha1.MacNodeLease).Status.NodeName; n != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: n}}}
	}
	return nil
}

// macNodeOfInstance: an orphaned binding waits for its instances' wipes.
func macNodeOfInstance(_ context.Context, obj client.Object) []reconcile.Request {
	if n := obj.(*computev1alpha1.MacOSInstance).Status.NodeName; n != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: n}}}
	}
	return nil
}

func (r *Reconciler) macNodesOfClass(ctx context.Context, obj client.Object) []reconcile.Request {
	nodes := &fleetv1alpha1.MacNodeList{}
	if err := r.Client.List(ctx, nodes, client.MatchingFields{index.MacNodeByClass: obj.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing MacNodes of a class failed", "MacNodeClass", obj.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: n.Name}})
	}
	return reqs
}

// scope carries one pass's observations.
type scope struct {
	node *fleetv1alpha1.MacNode
	now  metav1.Time
	// classFound is false when the MacNodeClass does not exist.
	classFound bool
	// problems are the policies' reasons the chassis may not serve.
	problems []string
	// unreported are the facts the policies judge that the agent has not
	// reported: until it has, the chassis is not judged.
	unreported []string
	// nodeFound is false when the agent has not registered the Node yet.
	nodeFound bool
	// orphaned: the binding's lease no longer exists.
	orphaned bool
	// holds says what keeps an orphaned binding's chassis from the pool
	// once earliestReleaseAt has passed.
	holds string
	// agent is the heartbeat's verdict: True, False (missed) or Unknown
	// (the agent never heartbeated); agentMessage says why.
	agent        metav1.ConditionStatus
	agentMessage string
	// heartbeat is the heartbeat Lease's last renewal; zero without one.
	heartbeat time.Time
	// class is the chassis' MacNodeClass, when it exists.
	class *fleetv1alpha1.MacNodeClass
	// quarantineStarted: this pass began a quarantine.
	quarantineStarted bool
	// quarantineRecovered: this pass ended one, the chassis recovered.
	quarantineRecovered bool
	// recoveryWait says what a rebooted chassis still waits for.
	recoveryWait string
	// events are written once the pass's status write has landed, so that a
	// retried pass does not tell a step twice.
	events []nodeEvent
	// observed: the pass observed all it needs to set the conditions.
	observed bool
}

// nodeEvent is one Event about the MacNode.
type nodeEvent struct {
	kind, reason, action, message string
}

// tell queues an Event for after the status write.
func (s *scope) tell(kind, reason, action, message string) {
	s.events = append(s.events, nodeEvent{kind: kind, reason: reason, action: action, message: message})
}

// Reconcile reads like the chassis' state machine, on the lease
// controller's skeleton: one pass observes (the retired chassis' unwiped
// disks, an orphaned binding, compliance, heartbeat), runs the quarantine
// loop, derives the phase and keeps the Node; then one updateStatus sets
// the conditions, and the patch helper writes the MacNode's status once,
// at the end. The binding, an orphaned one's release included, is the
// lease controller's; the slots are placement's. The node controller adds
// no finalizer: nothing of its own outlives the MacNode.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	mn := &fleetv1alpha1.MacNode{}
	if err := r.Client.Get(ctx, req.NamespacedName, mn); err != nil {
		if apierrors.IsNotFound(err) {
			r.compliant.forget(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &scope{node: mn, now: metav1.NewTime(r.Clock.Now())}
	helper := patch.NewHelper(mn, r.Client)
	// The status carries the resourceVersion read: the phase is derived
	// from a binding the lease controller may have changed meanwhile, and
	// the journal numbers its records. A conflict retries the pass from a
	// fresh read.
	helper.LockStatus()
	before := mn.Status.DeepCopy()
	defer func() {
		if !s.observed {
			return // conditions from half an observation would mislead
		}
		r.updateStatus(s)
		// As cluster-api's machine controller: the generation is observed
		// only by a pass that succeeded.
		if retErr == nil {
			s.node.Status.ObservedGeneration = s.node.Generation
		}
		wrote, err := r.patchStatus(ctx, s, before, helper)
		switch {
		case apierrors.IsConflict(err):
			res, retErr = ctrl.Result{RequeueAfter: conflict.RetryAfter}, nil
		case err != nil:
			retErr = errors.Join(retErr, err)
		case wrote:
			r.tell(ctx, s, before)
		}
	}()
	return r.reconcileNormal(ctx, s)
}

// reconcileNormal runs the phases. Only the Node's taints, labels and
// status, and the finalizers of a retired chassis' instances, are written
// here; the MacNode's status is the deferred patch's.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	if err := r.reconcileRetired(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	orphanRes, err := r.observeOrphan(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.assessCompliance(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	heartbeatRes, err := r.assessHeartbeat(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	s.observed = true
	r.reconcileQuarantine(s)
	derivePhase(s)
	return requeue.Lowest(orphanRes, heartbeatRes), r.reconcileNode(ctx, s)
}

// patchStatus journals the pass's transitions and writes the status, if it
// changed, through the patch helper: only what changed, so that it never
// writes back a binding or a slot of the lease or placement controller.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope, before *fleetv1alpha1.MacNodeStatus, helper *patch.Helper) (bool, error) {
	mn := s.node
	if dropped := journal.Chassis(before, mn, s.now.Time); dropped > 0 && r.JournalDropped != nil {
		r.JournalDropped(dropped)
	}
	if equality.Semantic.DeepEqual(before, &mn.Status) {
		return false, nil
	}
	if err := helper.Patch(ctx, mn); err != nil {
		if apierrors.IsConflict(err) {
			return false, err
		}
		return false, fmt.Errorf("patching MacNode %s status: %w", mn.Name, err)
	}
	return true, nil
}

// tell writes the pass's Events, once its status landed.
func (r *Reconciler) tell(ctx context.Context, s *scope, before *fleetv1alpha1.MacNodeStatus) {
	mn := s.node
	r.tellEvictions(ctx, mn, before.Audit.Next())
	// A claim is told on the lease (LeaseBound) and the Node (NodeTainted):
	// a chassis entering Leased has no Event of its own, as when the claim
	// wrote the phase.
	if phase.OrPending(before.Phase) != mn.Status.Phase && mn.Status.Phase != fleetv1alpha1.MacNodeLeased {
		r.Recorder.Eventf(mn, nil, corev1.EventTypeNormal, "Phase"+string(mn.Status.Phase), "Assess",
			"MacNode %s moved from %s to %s", mn.Name, phase.OrPending(before.Phase), mn.Status.Phase)
	}
	for _, e := range s.events {
		r.Recorder.Eventf(mn, nil, e.kind, e.reason, e.action, "%s", e.message)
	}
	r.Metrics.observe(mn, s.quarantineStarted, s.quarantineRecovered)
}

// tellEvictions tells each golden whose verified copy this write journaled
// evicted, on the MacOSImage, where `kubectl describe mimg` shows it.
func (r *Reconciler) tellEvictions(ctx context.Context, mn *fleetv1alpha1.MacNode, from int64) {
	if mn.Status.Audit == nil {
		return
	}
	for _, rec := range mn.Status.Audit.Records {
		if rec.Sequence < from || rec.Type != journal.RecordEvicted {
			continue
		}
		img := &fleetv1alpha1.MacOSImage{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: rec.Attributes["image"]}, img); err != nil {
			continue // a golden deleted meanwhile: the MacNode's own Event stays
		}
		r.Recorder.Eventf(img, nil, corev1.EventTypeNormal, fleetv1alpha1.ReasonImageEvicted, "Replicate",
			"chassis %s no longer holds a verified copy of %s: its agent evicted or discarded it (its MacNode's Events say why)",
			mn.Spec.Serial, rec.Attributes["digest"])
	}
}
