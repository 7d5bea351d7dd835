package node

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
)

// A cache that lags the agent's renewals does not make a chassis silent:
// a heartbeat it shows too old is read again from the API server first.
func TestAHeartbeatTheCacheShowsTooOldIsReadAgainBeforeTheChassisIsCalledSilent(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	const grace = 40 * time.Second
	now := t0.Add(time.Minute)
	for _, tc := range []struct {
		name      string
		apiServer client.Reader
		wantReady bool
	}{
		{"the API server holds a renewal the cache has not seen", fake.NewClientBuilder().WithObjects(heartbeat(now.Add(-5 * time.Second))).Build(), true},
		{"positive control: the API server's is as old", fake.NewClientBuilder().WithObjects(heartbeat(t0)).Build(), false},
		{"positive control: no second read", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The cache's heartbeat is a minute old: past the grace.
			r, c := reconciler(t, class(), macNode(good()), heartbeat(t0))
			r.HeartbeatGrace = grace
			r.APIReader = tc.apiServer
			r.Clock.(*clocktesting.FakeClock).SetTime(now)
			mn := run(t, r, c)
			if got := conditions.IsTrue(mn.Status.Conditions, fleetv1alpha1.ConditionAgentReady); got != tc.wantReady {
				t.Fatalf("AgentReady %v, want %v: %+v", got, tc.wantReady, mn.Status.Conditions)
			}
			if (mn.Status.Phase == fleetv1alpha1.MacNodeReady) != tc.wantReady {
				t.Errorf("phase %s, want Ready %v", mn.Status.Phase, tc.wantReady)
			}
		})
	}
}

// A silent chassis is reconciled again every grace, whether or not a
// renewal's watch event arrives: its recovery does not hang on one event.
func TestASilentChassisIsLookedAtAgainEveryGrace(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	const grace = 40 * time.Second
	for _, tc := range []struct {
		name      string
		renewed   time.Time
		wantAfter time.Duration
	}{
		{"silent: again after a grace", t0, grace},
		{"positive control: heartbeating, again when the last beat would grow too old", t0.Add(50 * time.Second), 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c := reconciler(t, class(), macNode(good()), heartbeat(tc.renewed))
			r.HeartbeatGrace = grace
			r.Clock.(*clocktesting.FakeClock).SetTime(t0.Add(time.Minute))
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "c02a"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.wantAfter {
				t.Errorf("requeued after %v, want %v", res.RequeueAfter, tc.wantAfter)
			}
			mn := &fleetv1alpha1.MacNode{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: "c02a"}, mn); err != nil {
				t.Fatal(err)
			}
			if got, want := conditions.IsTrue(mn.Status.Conditions, fleetv1alpha1.ConditionAgentReady), tc.renewed != t0; got != want {
				t.Errorf("AgentReady %v, want %v", got, want)
			}
		})
	}
}
