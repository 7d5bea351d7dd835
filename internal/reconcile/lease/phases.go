package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/chassis"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/inventory"
)

// reconcileNormal binds an unbound lease, and extends a bound one whose
// tenant lengthened it.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.node != nil {
		return ctrl.Result{}, r.extend(ctx, s)
	}
	return r.bind(ctx, s)
}

// extend moves the binding's earliestReleaseAt to boundAt + minimumDuration
// when the tenant lengthened the lease. It never moves it earlier. Both
// sides are whole seconds, as stored: a bound lease's pass writes nothing.
func (r *Reconciler) extend(ctx context.Context, s *scope) error {
	minimum, err := time.ParseDuration(s.lease.Spec.MinimumDuration)
	if err != nil {
		return nil // the policies refuse such a lease; nothing to extend
	}
	b := s.node.Status.Binding
	want := releaseFloor(b.BoundAt.Time, minimum)
	if !want.After(b.EarliestReleaseAt.Time) {
		return nil
	}
	extended := s.node.DeepCopy()
	extended.Status.Binding.EarliestReleaseAt = want
	d, err := r.StatusWrite(ctx, extended, s.node, nil)
	if err != nil {
		return err
	}
	if !d.Allowed() {
		return fmt.Errorf("extending the binding of MacNode %s refused: %s", s.node.Name, d.Violations[0].Message)
	}
	if err := r.Client.Status().Patch(ctx, extended, client.MergeFromWithOptions(s.node, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("extending the binding of MacNode %s: %w", s.node.Name, err)
	}
	s.node = extended
	r.Recorder.Eventf(s.lease, extended, corev1.EventTypeNormal, "LeaseExtended", "Extend",
		"Extended to at least %s", want.UTC().Format(time.RFC3339))
	return nil
}

// bind claims a Ready, unbound MacNode of the class. The claim is the
// MacNode's status.binding, written with optimistic concurrency: of two
// leases racing for one chassis, the second write fails and that lease
// tries again. Candidates go in a fixed order: the chassis released longest
// ago first (never-leased ones before all), then by name.
func (r *Reconciler) bind(ctx context.Context, s *scope) (ctrl.Result, error) {
	lease := s.lease
	class := &fleetv1alpha1.MacNodeClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: lease.Spec.NodeClassName}, class); err != nil {
		if apierrors.IsNotFound(err) {
			s.pendingReason = leasingv1alpha1.ReasonClassNotFound
			s.pendingMessage = fmt.Sprintf("MacNodeClass %s does not exist", lease.Spec.NodeClassName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting MacNodeClass %s: %w", lease.Spec.NodeClassName, err)
	}
	minimum, err := time.ParseDuration(lease.Spec.MinimumDuration)
	if err != nil {
		s.pendingReason = leasingv1alpha1.ReasonPolicyDenied
		s.pendingMessage = fmt.Sprintf("minimumDuration %q is not a duration", lease.Spec.MinimumDuration)
		return ctrl.Result{}, nil
	}

	// The cache's own objects, uncopied: in a cold fleet every chassis of
	// the class is free, and copying each (its journal included) for every
	// bind in flight was the operator's largest heap at N = 1,000. Nothing
	// here writes them; tryClaim copies the one it claims.
	free := &fleetv1alpha1.MacNodeList{}
	if err := r.Client.List(ctx, free, client.MatchingFields{index.FreeMacNodeByClass: class.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the free MacNodes of class %s: %w", class.Name, err)
	}
	candidates := freeNodes(free.Items)
	if len(candidates) == 0 {
		n, err := r.classSize(ctx, class.Name)
		if err != nil {
			return ctrl.Result{}, err
		}
		s.pendingReason = leasingv1alpha1.ReasonNoCapacity
		s.pendingMessage = fmt.Sprintf("no Ready chassis of class %s is free (%d in the class)", class.Name, n)
		return ctrl.Result{}, nil
	}

	boundAt := metav1.NewTime(s.now.UTC().Truncate(time.Second))
	era := releaseFloor(boundAt.Time, minimum)
	var denials []string
	for i := range candidates {
		// Skip the chassis another reconcile of this controller is claiming
		// or has claimed ahead of the cache: concurrent binds of one class
		// would all try the same first chassis, and all but one lose the
		// write after paying for its admission.
		if !r.claims.reserve(candidates[i].Name, s.now) {
			continue
		}
		bound, stop, err := r.tryClaim(ctx, s, candidates[i], boundAt, era, &denials)
		r.claims.unreserve(candidates[i].Name)
		if err != nil || bound {
			return ctrl.Result{}, err
		}
		if stop {
			break
		}
	}
	if len(denials) > 0 {
		s.pendingReason = leasingv1alpha1.ReasonPolicyDenied
		s.pendingMessage = strings.Join(denials, "; ")
		return ctrl.Result{}, nil
	}
	// Every candidate was taken under us; the cache will show it shortly.
	s.pendingReason = leasingv1alpha1.ReasonNoCapacity
	s.pendingMessage = fmt.Sprintf("every free chassis of class %s was claimed concurrently", class.Name)
	return ctrl.Result{RequeueAfter: conflict.RetryAfter}, nil
}

// tryClaim asks the policies whether the lease may bind candidate, and
// claims it if so. It returns whether it bound, and whether no other
// chassis will do (the lease itself is refused); denials gathers the
// policies' refusals.
func (r *Reconciler) tryClaim(ctx context.Context, s *scope, candidate *fleetv1alpha1.MacNode, boundAt, era metav1.Time, denials *[]string) (bound, stop bool, err error) {
	log := ctrl.LoggerFrom(ctx)
	lease := s.lease
	node := candidate.DeepCopy()
	claimed := node.DeepCopy()
	claimed.Status.Binding = &fleetv1alpha1.Binding{
		LeaseNamespace: lease.Namespace, LeaseName: lease.Name, LeaseUID: lease.UID,
		BoundAt: boundAt, EarliestReleaseAt: era, Images: slices.Clone(lease.Spec.Images),
	}
	// The claim is the binding alone: the node controller derives Leased
	// from it, as the one writer of the phase.

	// May-bind: the policies judge the lease as it would be bound and
	// the MacNode as it would be claimed, before anything is written.
	boundLease := lease.DeepCopy()
	fillBound(boundLease, claimed)
	claimedMap, err := inventory.ToMap(claimed)
	if err != nil {
		return false, false, err
	}
	leaseDecision, err := r.StatusWrite(ctx, boundLease, lease, map[string]any{"macNode": claimedMap})
	if err != nil {
		return false, false, err
	}
	nodeDecision, err := r.StatusWrite(ctx, claimed, node, nil)
	if err != nil {
		return false, false, err
	}
	if v := append(leaseDecision.Violations, nodeDecision.Violations...); len(v) > 0 {
		for _, viol := range v {
			log.Info("Binding refused by policy", "rule", viol.Rule, "code", viol.Code, "revision", leaseDecision.Revision, "MacNode", node.Name)
			*denials = append(*denials, viol.Message)
		}
		// The lease itself is illegal: no chassis will do.
		return false, !leaseDecision.Allowed(), nil
	}

	// The binding alone, with the resourceVersion read: of two leases
	// racing for the chassis, the second write fails.
	if err := r.Client.Status().Patch(ctx, claimed, client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			log.V(1).Info("Lost the race for a chassis", "MacNode", node.Name)
			return false, false, nil
		}
		return false, false, fmt.Errorf("claiming MacNode %s: %w", node.Name, err)
	}
	s.node = claimed
	r.claims.add(lease.UID, claimed.Name, s.now)
	r.Recorder.Eventf(lease, claimed, corev1.EventTypeNormal, "LeaseBound", "Bind",
		"Bound chassis %s (%s) until at least %s", claimed.Spec.Serial, claimed.Name, era.UTC().Format(time.RFC3339))
	log.Info("Lease bound", "MacNode", claimed.Name, "earliestReleaseAt", era.UTC())
	return true, false, nil
}

// releaseFloor is earliestReleaseAt for a lease bound at boundAt: minimum
// later, rounded up to the next whole second. Kubernetes stores times to
// the second, and lease.floor rounds minimumDuration up alike, so a
// fractional duration such as 24h0.5s binds, and its stored value is the
// one the policy and every later pass compute.
func releaseFloor(boundAt time.Time, minimum time.Duration) metav1.Time {
	t := boundAt.Add(minimum)
	if whole := t.Truncate(time.Second); whole.Before(t) {
		t = whole.Add(time.Second)
	}
	return metav1.NewTime(t.UTC())
}

// freeNodes are the Ready, unbound MacNodes, longest released first: the
// list's own items, not copies.
func freeNodes(nodes []fleetv1alpha1.MacNode) []*fleetv1alpha1.MacNode {
	var free []*fleetv1alpha1.MacNode
	for i := range nodes {
		if n := &nodes[i]; n.Status.Phase == fleetv1alpha1.MacNodeReady && n.Status.Binding == nil && n.DeletionTimestamp.IsZero() {
			free = append(free, n)
		}
	}
	sort.SliceStable(free, func(i, j int) bool {
		ri, rj := lastReleased(free[i]), lastReleased(free[j])
		if !ri.Equal(rj) {
			return ri.Before(rj)
		}
		return free[i].Name < free[j].Name
	})
	return free
}

func lastReleased(n *fleetv1alpha1.MacNode) time.Time {
	if h := n.Status.History; len(h) > 0 {
		return h[len(h)-1].ReleasedAt.Time
	}
	return time.Time{}
}

// fillBound writes the binding into the lease's status.
func fillBound(lease *leasingv1alpha1.MacNodeLease, node *fleetv1alpha1.MacNode) {
	b := node.Status.Binding
	lease.Status.Phase = leasingv1alpha1.LeaseBound
	lease.Status.NodeName = node.Name
	lease.Status.Serial = node.Spec.Serial
	lease.Status.BoundAt = b.BoundAt.DeepCopy()
	lease.Status.EarliestReleaseAt = b.EarliestReleaseAt.DeepCopy()
}

// reconcileDelete keeps a lease deleted before earliestReleaseAt in Held,
// and afterwards releases the chassis once every instance is wiped.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	lease := s.lease
	if s.node == nil {
		// Never bound, or released on an earlier pass.
		letGo(lease)
		return ctrl.Result{}, nil
	}
	era := s.node.Status.Binding.EarliestReleaseAt.Time
	if s.now.Before(era) {
		if lease.Status.HeldAt == nil {
			held := metav1.NewTime(s.now.UTC().Truncate(time.Second))
			lease.Status.HeldAt = &held
			r.Recorder.Eventf(lease, s.node, corev1.EventTypeNormal, "LeaseHeld", "Hold",
				"Deleted before earliestReleaseAt %s: chassis %s stays with this namespace until then", era.UTC().Format(time.RFC3339), s.node.Spec.Serial)
		}
		return ctrl.Result{RequeueAfter: era.Sub(s.now)}, nil
	}
	if waitsForRecovery(s.node) {
		// The chassis comes back to this lease first, and its release then
		// proceeds as any other: its agent is back to wipe the disks. Its
		// recovery enqueues the lease.
		s.awaitingRecovery = true
		return ctrl.Result{}, nil
	}
	return r.release(ctx, s)
}

// letGo takes the lease's finalizer off, now that its chassis is free (or
// it never had one), unless the audit exporter takes it: a Released lease
// that carries the audit finalizer loses both in the exporter's one write,
// once its last records are out, rather than in one write each (issue
// 39). The Released status, which this controller writes first, is what
// the exporter waits for.
func letGo(lease *leasingv1alpha1.MacNodeLease) {
	if lease.Status.Phase == leasingv1alpha1.LeaseReleased && controllerutil.ContainsFinalizer(lease, fleetv1alpha1.AuditFinalizer) {
		return
	}
	controllerutil.RemoveFinalizer(lease, fleetv1alpha1.LeaseFinalizer)
}

// waitsForRecovery reports whether a release waits for the chassis to come
// back from its quarantine: not when it needs a person, who may take long,
// nor when it is retired, whose agent will never come back.
func waitsForRecovery(node *fleetv1alpha1.MacNode) bool {
	q := node.Status.Quarantine
	return q.Active() && !q.NeedsAttention && !node.Spec.Retired
}

// release asks the policies, then takes the chassis' release a step
// further (chassis.Release: the instances deleted and wiped, the chassis
// reported empty, the binding cleared into the history), and lets the lease
// go once it is done.
func (r *Reconciler) release(ctx context.Context, s *scope) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	lease, node := s.lease, s.node

	// May-release: the lease marked Released, and the MacNode's binding
	// cleared, as the operator is about to write them.
	released := lease.DeepCopy()
	released.Status.Phase = leasingv1alpha1.LeaseReleased
	freed := chassis.Freed(node, s.now)
	for _, check := range []struct {
		what     string
		obj, old client.Object
	}{{"releasing the lease", released, lease}, {"freeing the MacNode", freed, node}} {
		d, err := r.StatusWrite(ctx, check.obj, check.old, nil)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !d.Allowed() {
			for _, v := range d.Violations {
				log.Info("Release refused by policy", "rule", v.Rule, "code", v.Code, "revision", d.Revision)
			}
			// A refusal is an answer, not a failure: retrying cannot change
			// it, and the tenant sees it in a condition. A later change to
			// the lease or the chassis enqueues the lease again.
			s.refusal = fmt.Sprintf("%s refused: %s", check.what, d.Violations[0].Message)
			return ctrl.Result{}, reconcile.TerminalError(errors.New(s.refusal))
		}
	}

	out, err := chassis.Release(ctx, r.Client, node, lease.Namespace, lease.Name, s.now)
	if err != nil {
		return ctrl.Result{}, err
	}
	if out.Freed == nil {
		// The instances' deletions, placement's slot writes and the agent's
		// reports re-enqueue this lease.
		s.awaiting, s.slots, s.holds = out.AwaitingWipe, out.Slots, out.Holds
		return ctrl.Result{}, nil
	}
	freed = out.Freed
	releasedAt := freed.Status.History[len(freed.Status.History)-1].ReleasedAt
	lease.Status.Phase = leasingv1alpha1.LeaseReleased
	lease.Status.ReleasedAt = &releasedAt
	letGo(lease)
	s.node, s.released = nil, true
	if freed.Spec.Retired {
		s.retired = true
		r.Recorder.Eventf(lease, freed, corev1.EventTypeWarning, "LeaseReleased", "Release",
			"Released chassis %s (%s), which is retired: its disks were not wiped, and are recorded in its status.unwipedDisks", freed.Spec.Serial, freed.Name)
	} else {
		r.Recorder.Eventf(lease, freed, corev1.EventTypeNormal, "LeaseReleased", "Release",
			"Released chassis %s (%s) back to the pool", freed.Spec.Serial, freed.Name)
	}
	log.Info("Lease released", "MacNode", freed.Name)
	return ctrl.Result{}, nil
}

// classSize is how many chassis class has, for the message of a lease that
// finds none free: one lookup in ClassSize, or, for a reconciler built
// without it (unit tests), a list of the class, read and not copied.
func (r *Reconciler) classSize(ctx context.Context, class string) (int, error) {
	if r.ClassSize != nil {
		return r.ClassSize.Get(class), nil
	}
	nodes := &fleetv1alpha1.MacNodeList{}
	if err := r.Client.List(ctx, nodes, client.MatchingFields{index.MacNodeByClass: class}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("listing MacNodes of class %s: %w", class, err)
	}
	return len(nodes.Items), nil
}
