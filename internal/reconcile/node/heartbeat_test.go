package node

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
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
