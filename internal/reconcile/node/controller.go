// Package node reconciles MacNodes: it moves a chassis through Pending,
// Enrolled and Ready from the facts its agent reports, as node.commercial and
// quota.never-circumvent decide, and keeps the matching Node's macrack.io/
// taints and tenant label in step with the MacNode's binding. Only the
// operator writes those.
package node

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/chassis"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/intent"
	"github.com/boualleiguie/macrack-operator/internal/taints"
)

// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodeclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=leasing.macrack.io,resources=macnodeleases,verbs=get;list;watch
// +kubebuilder:rbac:groups=compute.macrack.io,resources=macosinstances,verbs=get;list;watch;delete;patch

// Reconciler reconciles MacNodes and their Nodes.
type Reconciler struct {
	Client   client.Client
	Engine   *policy.Engine
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
	Params   policy.Params
	// Identity is the operator's username, as the API server sees it.
	Identity string
	// Ticks, if set, enqueues MacNodes from outside the cluster: tests step a
	// fake clock and send the MacNodes whose time has come.
	Ticks <-chan event.GenericEvent
	// HeartbeatGrace is how old the agent's heartbeat Lease may grow before
	// the chassis and its Node are marked not ready: the heartbeat interval
	// times the number of heartbeats that may be missed.
	HeartbeatGrace time.Duration
}

// HeartbeatNamespace holds the agents' heartbeat Leases, as kubelets' do.
const HeartbeatNamespace = "kube-node-lease"

// conflictRetry is how soon a status write that lost an optimistic
// concurrency race is retried, from a fresher read.
const conflictRetry = 100 * time.Millisecond

// SetupWithManager registers the controller and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1alpha1.MacNode{}).
		Named("macnode").
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(macNodeOfNode)).
		Watches(&fleetv1alpha1.MacNodeClass{}, handler.EnqueueRequestsFromMapFunc(r.macNodesOfClass)).
		Watches(&leasingv1alpha1.MacNodeLease{}, handler.EnqueueRequestsFromMapFunc(macNodeOfLease)).
		Watches(&computev1alpha1.MacOSInstance{}, handler.EnqueueRequestsFromMapFunc(macNodeOfInstance)).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(macNodeOfHeartbeat))
	if r.Ticks != nil {
		b = b.WatchesRawSource(source.Channel(r.Ticks, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}

// macNodeOfNode: a Node and its MacNode share a name.
func macNodeOfNode(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: obj.GetName()}}}
}

// macNodeOfHeartbeat: an agent's heartbeat Lease is named after its node.
func macNodeOfHeartbeat(_ context.Context, obj client.Object) []reconcile.Request {
	if obj.GetNamespace() != HeartbeatNamespace {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: obj.GetName()}}}
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
	if err := r.Client.List(ctx, nodes, client.MatchingFields{index.MacNodeByClass: obj.GetName()}); err != nil {
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
	// nodeFound is false when the agent has not registered the Node yet.
	nodeFound bool
	// orphaned: the binding's lease no longer exists.
	orphaned bool
	// freed: this pass cleared an orphaned binding.
	freed bool
	// holds says what keeps an orphaned binding's chassis from the pool,
	// by its agent's report.
	holds string
	// agent is the heartbeat's verdict: True, False (missed) or Unknown
	// (the agent never heartbeated); agentMessage says why.
	agent        metav1.ConditionStatus
	agentMessage string
}

// Reconcile derives the MacNode's phase and conditions, then the Node's
// taints and tenant label.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mn := &fleetv1alpha1.MacNode{}
	if err := r.Client.Get(ctx, req.NamespacedName, mn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &scope{node: mn, now: metav1.NewTime(r.Clock.Now())}
	if err := r.reconcileRetired(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	mn = s.node // as the break-glass may have written it
	res, err := r.reconcileOrphanBinding(ctx, s)
	if err != nil || s.freed {
		return res, err
	}
	if err := r.assessCompliance(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	heartbeatRes, err := r.assessHeartbeat(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	res = lowestRequeue(res, heartbeatRes)
	if err := r.reconcileNode(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	before := mn.Status.DeepCopy()
	r.updateStatus(s)
	if equality.Semantic.DeepEqual(before, &mn.Status) {
		return res, nil
	}
	// A full update with the read resourceVersion: never clobber a binding
	// the lease controller wrote meanwhile.
	if err := r.Client.Status().Update(ctx, mn); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, fmt.Errorf("updating MacNode %s status: %w", mn.Name, err)
	}
	if orPending(before.Phase) != mn.Status.Phase {
		r.Recorder.Eventf(mn, nil, corev1.EventTypeNormal, "Phase"+string(mn.Status.Phase), "Assess",
			"MacNode %s moved from %s to %s", mn.Name, orPending(before.Phase), mn.Status.Phase)
	}
	return res, nil
}

func orPending(p fleetv1alpha1.MacNodePhase) fleetv1alpha1.MacNodePhase {
	if p == "" {
		return fleetv1alpha1.MacNodePending
	}
	return p
}

// reconcileOrphanBinding handles a binding whose lease is gone, which only
// a forced removal of the lease's finalizer leaves behind. The binding holds
// the chassis until earliestReleaseAt all the same; then the lease's
// instances are deleted, and once wiped the chassis is freed.
func (r *Reconciler) reconcileOrphanBinding(ctx context.Context, s *scope) (ctrl.Result, error) {
	b := s.node.Status.Binding
	if b == nil {
		return ctrl.Result{}, nil
	}
	l := &leasingv1alpha1.MacNodeLease{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.LeaseNamespace, Name: b.LeaseName}, l)
	if err == nil && l.UID == b.LeaseUID {
		return ctrl.Result{}, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("getting lease %s/%s: %w", b.LeaseNamespace, b.LeaseName, err)
	}
	s.orphaned = true
	log := ctrl.LoggerFrom(ctx).WithValues("MacNodeLease", b.LeaseNamespace+"/"+b.LeaseName)
	if s.now.Before(&b.EarliestReleaseAt) {
		log.Info("Binding outlives its lease; the chassis stays held", "earliestReleaseAt", b.EarliestReleaseAt.UTC())
		return ctrl.Result{RequeueAfter: b.EarliestReleaseAt.Sub(s.now.Time)}, nil
	}
	d, err := r.decide(ctx, chassis.Freed(s.node, s.now.Time), s.node)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !d.Allowed() {
		return ctrl.Result{}, fmt.Errorf("freeing MacNode %s refused: %s", s.node.Name, d.Violations[0].Message)
	}
	out, err := chassis.Release(ctx, r.Client, s.node, b.LeaseNamespace, b.LeaseName, s.now.Time)
	if err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, err
	}
	if out.Freed == nil {
		if s.holds = out.Holds; s.holds != "" {
			log.Info("Orphaned binding kept: the chassis is not empty", "holds", out.Holds)
		}
		return ctrl.Result{}, nil
	}
	freed := out.Freed
	s.freed = true
	r.Recorder.Eventf(freed, nil, corev1.EventTypeNormal, "ChassisReleased", "Release",
		"Released chassis %s: its lease %s/%s is gone and earliestReleaseAt has passed", freed.Spec.Serial, b.LeaseNamespace, b.LeaseName)
	log.Info("Orphaned binding released")
	return ctrl.Result{}, nil
}

// decide asks the policy about a status write the operator is about to make.
func (r *Reconciler) decide(ctx context.Context, to, from *fleetv1alpha1.MacNode) (policy.Decision, error) {
	return intent.Checker{Client: r.Client, Engine: r.Engine, Clock: r.Clock, Params: r.Params, Identity: r.Identity}.StatusWrite(ctx, to, from, nil)
}

// assessCompliance asks the policies whether this chassis may enter service
// now: the write the operator would make, from Enrolled to Ready.
func (r *Reconciler) assessCompliance(ctx context.Context, s *scope) error {
	mn := s.node
	class := &fleetv1alpha1.MacNodeClass{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: mn.Spec.NodeClassName}, class)
	switch {
	case apierrors.IsNotFound(err):
		s.problems = append(s.problems, fmt.Sprintf("MacNodeClass %s does not exist", mn.Spec.NodeClassName))
		return nil
	case err != nil:
		return fmt.Errorf("getting MacNodeClass %s: %w", mn.Spec.NodeClassName, err)
	}
	s.classFound = true
	if mn.Status.Reported == nil {
		return nil
	}
	from := mn.DeepCopy()
	from.Status.Phase = fleetv1alpha1.MacNodeEnrolled
	to := mn.DeepCopy()
	to.Status.Phase = fleetv1alpha1.MacNodeReady
	d, err := r.decide(ctx, to, from)
	if err != nil {
		return err
	}
	for _, v := range d.Violations {
		if v.Rule == "node.commercial" || v.Rule == "quota.never-circumvent" || v.Code == policy.CodeError || v.Code == policy.CodeDisagreement {
			s.problems = append(s.problems, v.Message)
		}
	}
	return nil
}

// assessHeartbeat reads the agent's heartbeat Lease. It returns when to
// look again: when the heartbeat will have grown too old.
func (r *Reconciler) assessHeartbeat(ctx context.Context, s *scope) (ctrl.Result, error) {
	hb := &coordinationv1.Lease{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: HeartbeatNamespace, Name: s.node.Name}, hb)
	switch {
	case apierrors.IsNotFound(err):
		s.agent, s.agentMessage = metav1.ConditionUnknown, "the host agent has not sent a heartbeat yet"
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("getting the heartbeat of %s: %w", s.node.Name, err)
	}
	if hb.Spec.RenewTime == nil || r.HeartbeatGrace <= 0 {
		s.agent, s.agentMessage = metav1.ConditionUnknown, "the heartbeat has no renew time"
		return ctrl.Result{}, nil
	}
	deadline := hb.Spec.RenewTime.Add(r.HeartbeatGrace)
	if !s.now.Time.Before(deadline) {
		s.agent = metav1.ConditionFalse
		s.agentMessage = fmt.Sprintf("no heartbeat since %s (more than %s)", hb.Spec.RenewTime.UTC().Format(time.RFC3339), r.HeartbeatGrace)
		return ctrl.Result{}, nil
	}
	s.agent, s.agentMessage = metav1.ConditionTrue, "the host agent heartbeats"
	return ctrl.Result{RequeueAfter: deadline.Sub(s.now.Time)}, nil
}

func lowestRequeue(a, b ctrl.Result) ctrl.Result {
	switch {
	case a.RequeueAfter == 0:
		return b
	case b.RequeueAfter == 0 || a.RequeueAfter < b.RequeueAfter:
		return a
	}
	return b
}

// reconcileNode keeps the Node's macrack.io/ taints and tenant label as the
// binding says, and touches nothing else on it.
func (r *Reconciler) reconcileNode(ctx context.Context, s *scope) error {
	n := &corev1.Node{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: s.node.Name}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // the agent has not registered yet; its creation re-enqueues us
		}
		return fmt.Errorf("getting Node %s: %w", s.node.Name, err)
	}
	s.nodeFound = true
	tenant := ""
	if b := s.node.Status.Binding; b != nil {
		tenant = b.LeaseNamespace
	}
	updated := n.DeepCopy()
	var taintsChanged, labelsChanged bool
	updated.Spec.Taints, taintsChanged = taints.Apply(n.Spec.Taints, taints.Desired(tenant))
	updated.Labels, labelsChanged = taints.Labels(n.Labels, tenant)
	if s.agent == metav1.ConditionFalse {
		if err := r.markNodeNotReady(ctx, n, s); err != nil {
			return err
		}
	}
	if !taintsChanged && !labelsChanged {
		return nil
	}
	if err := r.Client.Patch(ctx, updated, client.MergeFromWithOptions(n, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("updating taints of Node %s: %w", n.Name, err)
	}
	what := "unleased"
	if tenant != "" {
		what = "leased to " + tenant
	}
	r.Recorder.Eventf(s.node, updated, corev1.EventTypeNormal, "NodeTainted", "Taint", "Node %s is now %s", n.Name, what)
	return nil
}

// markNodeNotReady sets the Node's Ready condition to False when the agent
// fell silent, as the node lifecycle controller would for a kubelet.
func (r *Reconciler) markNodeNotReady(ctx context.Context, n *corev1.Node, s *scope) error {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonHeartbeatMissed {
			return nil
		}
	}
	updated := n.DeepCopy()
	cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: fleetv1alpha1.ReasonHeartbeatMissed,
		Message: "MacRack host agent: " + s.agentMessage, LastTransitionTime: s.now, LastHeartbeatTime: s.now}
	replaced := false
	for i := range updated.Status.Conditions {
		if updated.Status.Conditions[i].Type == corev1.NodeReady {
			updated.Status.Conditions[i] = cond
			replaced = true
		}
	}
	if !replaced {
		updated.Status.Conditions = append(updated.Status.Conditions, cond)
	}
	if err := r.Client.Status().Patch(ctx, updated, client.MergeFrom(n)); err != nil {
		return fmt.Errorf("marking Node %s not ready: %w", n.Name, err)
	}
	r.Recorder.Eventf(s.node, updated, corev1.EventTypeWarning, fleetv1alpha1.ReasonHeartbeatMissed, "Heartbeat", "%s", s.agentMessage)
	return nil
}

// updateStatus derives the phase and the conditions.
func (r *Reconciler) updateStatus(s *scope) {
	mn := s.node
	st := &mn.Status
	gen := mn.Generation
	c := &st.Conditions
	compliant := s.classFound && st.Reported != nil && len(s.problems) == 0

	switch {
	case mn.Spec.Retired:
		st.Phase = fleetv1alpha1.MacNodeRetired
	case st.Phase == fleetv1alpha1.MacNodeQuarantined, st.Phase == fleetv1alpha1.MacNodeRebooting:
		// Owned by later loops (quarantine, retirement); left as they are.
	case st.Binding != nil:
		st.Phase = fleetv1alpha1.MacNodeLeased
	case st.Reported == nil:
		st.Phase = fleetv1alpha1.MacNodePending
	case compliant && s.agent != metav1.ConditionFalse:
		st.Phase = fleetv1alpha1.MacNodeReady
	default:
		st.Phase = fleetv1alpha1.MacNodeEnrolled
	}

	switch {
	case !s.classFound:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionHardwareCompliant, fleetv1alpha1.ReasonClassNotFound, strings.Join(s.problems, "; ")), gen, s.now)
	case st.Reported == nil:
		conditions.Set(c, conditions.Unknown(fleetv1alpha1.ConditionHardwareCompliant, fleetv1alpha1.ReasonNotReported, "the host agent has not reported yet"), gen, s.now)
	case len(s.problems) > 0:
		if conditions.Set(c, conditions.False(fleetv1alpha1.ConditionHardwareCompliant, fleetv1alpha1.ReasonPolicyViolation, strings.Join(s.problems, "; ")), gen, s.now) {
			r.Recorder.Eventf(mn, nil, corev1.EventTypeWarning, "HardwareNotCompliant", "Assess", "%s", strings.Join(s.problems, "; "))
		}
	default:
		conditions.Set(c, conditions.True(fleetv1alpha1.ConditionHardwareCompliant, fleetv1alpha1.ReasonCompliant, "the reported facts meet the class, SIP is on, the entitlement is present"), gen, s.now)
	}

	if b := st.Binding; b != nil {
		msg := fmt.Sprintf("bound to %s/%s until at least %s", b.LeaseNamespace, b.LeaseName, b.EarliestReleaseAt.UTC().Format("2006-01-02T15:04:05Z"))
		if s.orphaned {
			msg += "; the lease is gone, the binding holds the chassis until then"
		}
		if s.holds != "" {
			msg += "; " + s.holds
		}
		conditions.Set(c, conditions.True(fleetv1alpha1.ConditionLeased, fleetv1alpha1.ReasonBound, msg), gen, s.now)
	} else {
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionLeased, fleetv1alpha1.ReasonFree, "no lease holds the chassis"), gen, s.now)
	}

	switch s.agent {
	case metav1.ConditionTrue:
		conditions.Set(c, conditions.True(fleetv1alpha1.ConditionAgentReady, fleetv1alpha1.ReasonHeartbeatCurrent, s.agentMessage), gen, s.now)
	case metav1.ConditionFalse:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionAgentReady, fleetv1alpha1.ReasonHeartbeatMissed, s.agentMessage), gen, s.now)
	default:
		conditions.Set(c, conditions.Unknown(fleetv1alpha1.ConditionAgentReady, fleetv1alpha1.ReasonNotReported, s.agentMessage), gen, s.now)
	}

	switch {
	case mn.Spec.Retired:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionReady, fleetv1alpha1.ReasonRetired,
			"the chassis is retired: out of service for good"), gen, s.now)
	case s.agent == metav1.ConditionFalse:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionReady, fleetv1alpha1.ReasonHeartbeatMissed, s.agentMessage), gen, s.now)
	case st.Phase == fleetv1alpha1.MacNodeReady, st.Phase == fleetv1alpha1.MacNodeLeased:
		conditions.Set(c, conditions.True(fleetv1alpha1.ConditionReady, string(st.Phase), "the chassis serves leases"), gen, s.now)
	default:
		conditions.Set(c, conditions.False(fleetv1alpha1.ConditionReady, fleetv1alpha1.ReasonAwaitingCompliance,
			fmt.Sprintf("the chassis is %s", orPending(st.Phase))), gen, s.now)
	}
	st.ObservedGeneration = gen
}
