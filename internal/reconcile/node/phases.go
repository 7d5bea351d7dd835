package node

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/chassis"
	"github.com/boualleiguie/macrack-operator/internal/policy"
)

// derivePhase is the one place the MacNode's phase is decided, from what
// the pass observed. The quarantine loop fences before anything else: a
// chassis in the loop is Quarantined or Rebooting whether or not a lease
// holds it, and one that needs a person stays Quarantined even once its
// lease lets go of it, so that it never returns to the pool.
func derivePhase(s *scope) {
	mn := s.node
	st := &mn.Status
	q := st.Quarantine
	compliant := s.classFound && len(s.unreported) == 0 && len(s.problems) == 0
	switch {
	case mn.Spec.Retired:
		st.Phase = fleetv1alpha1.MacNodeRetired
	case q.Active() && q.RebootRequestedAt != nil && !q.NeedsAttention:
		st.Phase = fleetv1alpha1.MacNodeRebooting
	case q.Active():
		st.Phase = fleetv1alpha1.MacNodeQuarantined
	case st.Binding != nil:
		st.Phase = fleetv1alpha1.MacNodeLeased
	case len(s.unreported) > 0:
		st.Phase = fleetv1alpha1.MacNodePending
	case compliant && s.agent != metav1.ConditionFalse:
		st.Phase = fleetv1alpha1.MacNodeReady
	default:
		st.Phase = fleetv1alpha1.MacNodeEnrolled
	}
}

// observeOrphan notes a binding whose lease is gone, which only a forced
// removal of the lease's finalizer leaves behind, for the Leased
// condition. The binding is the lease controller's: it holds the chassis
// until earliestReleaseAt, and then the lease controller releases it.
// What keeps it meanwhile is said here.
func (r *Reconciler) observeOrphan(ctx context.Context, s *scope) (ctrl.Result, error) {
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
	if s.now.Before(&b.EarliestReleaseAt) {
		// Look again then, to say what the release waits for.
		return ctrl.Result{RequeueAfter: b.EarliestReleaseAt.Sub(s.now.Time)}, nil
	}
	if n := len(s.node.Status.Slots); n > 0 {
		s.holds = fmt.Sprintf("%d slot(s) wait for their instances' wipes", n)
	} else {
		s.holds = chassis.Holds(s.node)
	}
	return ctrl.Result{}, nil
}

// assessCompliance asks the policies whether this chassis may enter service
// now: the write the operator would make, from Enrolled to Ready. It asks
// only once the agent has reported the facts the policies judge: before,
// every rule would refuse for a fact not sent yet, and record a denial for
// a chassis that merely waits.
func (r *Reconciler) assessCompliance(ctx context.Context, s *scope) error {
	mn := s.node
	s.unreported = mn.Status.Reported.UnreportedFacts()
	class := &fleetv1alpha1.MacNodeClass{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: mn.Spec.NodeClassName}, class)
	switch {
	case apierrors.IsNotFound(err):
		s.problems = append(s.problems, fmt.Sprintf("MacNodeClass %s does not exist", mn.Spec.NodeClassName))
		return nil
	case err != nil:
		return fmt.Errorf("getting MacNodeClass %s: %w", mn.Spec.NodeClassName, err)
	}
	s.classFound, s.class = true, class
	if len(s.unreported) > 0 {
		return nil
	}
	revision := r.Engine.Revision()
	if r.compliant.holds(mn, class, revision) {
		return nil
	}
	from := mn.DeepCopy()
	from.Status.Phase = fleetv1alpha1.MacNodeEnrolled
	to := mn.DeepCopy()
	to.Status.Phase = fleetv1alpha1.MacNodeReady
	d, err := r.StatusWrite(ctx, to, from, nil)
	if err != nil {
		return err
	}
	if len(d.Violations) == 0 {
		r.compliant.keep(mn, class, revision)
		return nil
	}
	r.compliant.forget(mn.Name)
	for _, v := range d.Violations {
		if v.Rule == "node.commercial" || v.Rule == "quota.never-circumvent" || v.Code == policy.CodeError || v.Code == policy.CodeDisagreement {
			s.problems = append(s.problems, v.Message)
		}
	}
	return nil
}

// assessHeartbeat reads the agent's heartbeat Lease. It returns when to
// look again: when the heartbeat will have grown too old. A heartbeat the
// cache shows too old is read again from the API server before the
// chassis is called silent: under load the watch that fills the cache
// lags the agent's renewals, and a lag is no missed heartbeat.
func (r *Reconciler) assessHeartbeat(ctx context.Context, s *scope) (ctrl.Result, error) {
	key := types.NamespacedName{Namespace: fleetv1alpha1.HeartbeatNamespace, Name: s.node.Name}
	hb := &coordinationv1.Lease{}
	err := r.Client.Get(ctx, key, hb)
	if err == nil && r.APIReader != nil && heartbeatStale(hb, r.HeartbeatGrace, s.now.Time) {
		live := &coordinationv1.Lease{}
		if err := r.APIReader.Get(ctx, key, live); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading the heartbeat of %s from the API server: %w", s.node.Name, err)
		} else if err == nil {
			hb = live
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		s.agent, s.agentMessage = metav1.ConditionUnknown, "the host agent has not sent a heartbeat yet"
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("getting the heartbeat of %s: %w", s.node.Name, err)
	}
	if hb.Spec.RenewTime != nil {
		s.heartbeat = hb.Spec.RenewTime.Time
	}
	if hb.Spec.RenewTime == nil || r.HeartbeatGrace <= 0 {
		s.agent, s.agentMessage = metav1.ConditionUnknown, "the heartbeat has no renew time"
		return ctrl.Result{}, nil
	}
	deadline := hb.Spec.RenewTime.Add(r.HeartbeatGrace)
	if heartbeatStale(hb, r.HeartbeatGrace, s.now.Time) {
		s.agent = metav1.ConditionFalse
		s.agentMessage = fmt.Sprintf("no heartbeat since %s (more than %s)", hb.Spec.RenewTime.UTC().Format(time.RFC3339), r.HeartbeatGrace)
		// A silent chassis is looked at again every grace, as
		// kube-controller-manager's node lifecycle controller polls,
		// rather than only on the renewal's watch event: at N = 1,000
		// one chassis whose renewals resumed stayed NotReady for 20
		// minutes without a reconcile (BENCHMARKS.md).
		return ctrl.Result{RequeueAfter: r.HeartbeatGrace}, nil
	}
	s.agent, s.agentMessage = metav1.ConditionTrue, "the host agent heartbeats"
	return ctrl.Result{RequeueAfter: deadline.Sub(s.now.Time)}, nil
}

// heartbeatStale reports whether hb was last renewed grace or more before
// now.
func heartbeatStale(hb *coordinationv1.Lease, grace time.Duration, now time.Time) bool {
	return hb.Spec.RenewTime != nil && grace > 0 && !now.Before(hb.Spec.RenewTime.Add(grace))
}
