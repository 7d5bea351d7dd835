package node

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/nodeready"
)

func nodeReadyOf(t *testing.T, c client.Client) (corev1.NodeCondition, string) {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "c02a"}, n); err != nil {
		t.Fatal(err)
	}
	if r := nodeready.Find(n.Status.Conditions); r != nil {
		return *r, n.ResourceVersion
	}
	return corev1.NodeCondition{}, n.ResourceVersion
}

// The operator writes the Node's Ready True and False from the heartbeat
// and the facts, leaves kube-controller-manager's Unknown until a renewal
// comes after it, and never rewrites a condition for its reason alone.
func TestTheOperatorKeepsTheNodesReadyConditionAndLeavesKubeControllerManagersUnknown(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	l := newLoop(t, false) // one pass at t0: heartbeat t0, grace 1h
	r, c := l.r, l.c

	got, _ := nodeReadyOf(t, c)
	if got.Status != corev1.ConditionTrue || got.Reason != fleetv1alpha1.ReasonHeartbeatCurrent || !got.LastHeartbeatTime.Time.Equal(t0) {
		t.Fatalf("a heartbeating, reported chassis' Node: %+v, want True at the renewal", got)
	}
	drainEvents(r)

	// kube-controller-manager, on a shorter grace than the operator's,
	// finds the heartbeat stale: Unknown. The operator's clock still
	// calls it fresh, and leaves the Unknown as it is.
	l.clock.SetTime(t0.Add(50 * time.Second))
	n := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: "c02a"}, n); err != nil {
		t.Fatal(err)
	}
	unknown := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
		Message: "Kubelet stopped posting node status.", LastHeartbeatTime: got.LastHeartbeatTime, LastTransitionTime: metav1.NewTime(l.clock.Now())}
	n.Status.Conditions = []corev1.NodeCondition{unknown}
	if err := c.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	_, rv := nodeReadyOf(t, c)
	for range 3 {
		l.clock.Step(time.Second)
		l.pass()
	}
	if got, now := nodeReadyOf(t, c); now != rv || got.Status != corev1.ConditionUnknown {
		t.Fatalf("the operator wrote over kube-controller-manager's Unknown with no newer heartbeat: %+v", got)
	}

	// The positive control: a renewal after the Unknown makes it True.
	l.beat()
	l.pass()
	if got, _ = nodeReadyOf(t, c); got.Status != corev1.ConditionTrue || !got.LastTransitionTime.Time.Equal(l.clock.Now()) {
		t.Fatalf("after a renewal: %+v, want True", got)
	}

	// The operator's own grace passes: False, with the Event, over True,
	// and with True's LastHeartbeatTime, which kube-controller-manager
	// would take a new one of for a sign of life.
	renewed := l.clock.Now()
	l.clock.Step(time.Second)
	l.beat() // a later renewal, which True does not record: no write
	l.pass()
	l.clock.Step(r.HeartbeatGrace)
	l.pass()
	got, rv = nodeReadyOf(t, c)
	if got.Status != corev1.ConditionFalse || got.Reason != fleetv1alpha1.ReasonHeartbeatMissed || !got.LastHeartbeatTime.Time.Equal(renewed) {
		t.Fatalf("a silent chassis' Node: %+v, want False, HeartbeatMissed, with True's LastHeartbeatTime", got)
	}
	if ev := drainEvents(r); !strings.Contains(ev, fleetv1alpha1.ReasonHeartbeatMissed) {
		t.Errorf("no %s Event: %q", fleetv1alpha1.ReasonHeartbeatMissed, ev)
	}
	// Another False, or kube-controller-manager's Unknown over it, stands.
	l.clock.Step(time.Minute)
	l.pass()
	if _, now := nodeReadyOf(t, c); now != rv {
		t.Errorf("the operator rewrote its own False")
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "c02a"}, n); err != nil {
		t.Fatal(err)
	}
	unknown.LastTransitionTime = metav1.NewTime(l.clock.Now())
	n.Status.Conditions = []corev1.NodeCondition{unknown}
	if err := c.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	_, rv = nodeReadyOf(t, c)
	l.clock.Step(time.Second)
	l.pass()
	if got, now := nodeReadyOf(t, c); now != rv {
		t.Errorf("the operator wrote over kube-controller-manager's Unknown on a stale heartbeat: %+v", got)
	}

	// A reason of another writer's, with the same status, stands too.
	l.beat()
	l.pass()
	if err := c.Get(ctx, client.ObjectKey{Name: "c02a"}, n); err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "AgentReady", Message: "MacRack host agent is heartbeating"}}
	if err := c.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	_, rv = nodeReadyOf(t, c)
	l.clock.Step(time.Second)
	l.pass()
	if got, now := nodeReadyOf(t, c); now != rv || got.Reason != "AgentReady" {
		t.Errorf("the operator rewrote a True for its reason: %+v", got)
	}
}

// A chassis whose facts are not in is not Ready, however it heartbeats.
func TestANodeIsNotReadyUntilItsAgentReportedItsFacts(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		facts *fleetv1alpha1.ReportedFacts
		want  corev1.ConditionStatus
	}{
		{"no facts: no condition, which is not ready", nil, ""},
		{"positive control: the facts in, Ready", good(), corev1.ConditionTrue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c := reconciler(t, class(), macNode(tc.facts), heartbeat(t0), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c02a"}})
			r.Clock.(*clocktesting.FakeClock).SetTime(t0)
			r.HeartbeatGrace = time.Minute
			run(t, r, c)
			if got, _ := nodeReadyOf(t, c); got.Status != tc.want {
				t.Errorf("Ready %q, want %q: %+v", got.Status, tc.want, got)
			}
		})
	}
}

// A renewal enqueues a chassis whose Node is not Ready, so that a
// heartbeat after kube-controller-manager's Unknown is seen at once; a
// ready chassis' renewals enqueue nothing.
func TestARenewalEnqueuesAChassisWhoseNodeIsNotReady(t *testing.T) {
	mn := macNode(good())
	mn.Status.Conditions = []metav1.Condition{{Type: fleetv1alpha1.ConditionAgentReady, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonHeartbeatCurrent}}
	for _, tc := range []struct {
		name    string
		ready   corev1.ConditionStatus
		enqueue bool
	}{
		{"kube-controller-manager's Unknown", corev1.ConditionUnknown, true},
		{"positive control: Ready", corev1.ConditionTrue, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c02a"},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: tc.ready}}}}
			r, _ := reconciler(t, mn.DeepCopy(), n)
			r.HeartbeatGrace = time.Minute
			got := r.macNodeOfHeartbeat(context.Background(), heartbeat(time.Now()))
			if (len(got) == 1) != tc.enqueue {
				t.Errorf("enqueued %v, want %v", got, tc.enqueue)
			}
		})
	}
}
