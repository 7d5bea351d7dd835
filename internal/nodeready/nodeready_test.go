package nodeready

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

func TestDesired(t *testing.T) {
	for _, tc := range []struct {
		name       string
		o          Observation
		wantStatus corev1.ConditionStatus
		wantReason string
	}{
		{"an agent that heartbeats and has reported its facts is ready", Observation{Heartbeat: t0}, corev1.ConditionTrue, fleetv1alpha1.ReasonHeartbeatCurrent},
		{"a stale heartbeat is not ready", Observation{Heartbeat: t0, Stale: true, Message: "no heartbeat since"}, corev1.ConditionFalse, fleetv1alpha1.ReasonHeartbeatMissed},
		{"no heartbeat at all is not ready", Observation{Message: "no heartbeat yet"}, corev1.ConditionFalse, fleetv1alpha1.ReasonNotReported},
		{"an agent that has not reported its facts is not ready", Observation{Heartbeat: t0, Unreported: []string{"disk"}}, corev1.ConditionFalse, fleetv1alpha1.ReasonAwaitingFacts},
		{"a stale heartbeat says so before the facts", Observation{Heartbeat: t0, Stale: true, Unreported: []string{"disk"}}, corev1.ConditionFalse, fleetv1alpha1.ReasonHeartbeatMissed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Desired(tc.o)
			if got.Type != corev1.NodeReady || got.Status != tc.wantStatus || got.Reason != tc.wantReason || got.Message == "" {
				t.Errorf("got %+v, want %s %s with a message", got, tc.wantStatus, tc.wantReason)
			}
		})
	}
}

func cond(status corev1.ConditionStatus, reason string, transition time.Time) *corev1.NodeCondition {
	return &corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(transition),
		LastHeartbeatTime: metav1.NewTime(transition.Add(-time.Second))}
}

func TestSet(t *testing.T) {
	ready := Desired(Observation{Heartbeat: t0})
	stale := Desired(Observation{Heartbeat: t0, Stale: true, Message: "no heartbeat"})
	now := t0.Add(time.Minute)
	for _, tc := range []struct {
		name      string
		current   *corev1.NodeCondition
		want      corev1.NodeCondition
		heartbeat time.Time
		write     bool
	}{
		{"a new Node with a heartbeat is marked ready", nil, ready, t0, true},
		{"a new Node without a heartbeat is left without a condition: none is not ready already", nil, stale, time.Time{}, false},
		{"a True that differs only in reason and message is left", cond(corev1.ConditionTrue, "AgentReady", t0.Add(-time.Hour)), ready, t0, false},
		{"a False that differs only in reason and message is left", cond(corev1.ConditionFalse, "KubeletNotReady", t0), stale, t0, false},
		{"a stale heartbeat makes True False", cond(corev1.ConditionTrue, fleetv1alpha1.ReasonHeartbeatCurrent, t0.Add(-time.Hour)), stale, t0, true},
		{"a stale heartbeat leaves kube-controller-manager's Unknown", cond(corev1.ConditionUnknown, "NodeStatusUnknown", t0.Add(40*time.Second)), stale, t0, false},
		{"a heartbeat fresh by the operator's clock leaves an Unknown set after the last renewal", cond(corev1.ConditionUnknown, "NodeStatusUnknown", t0.Add(40*time.Second)), ready, t0, false},
		{"the same, set in the second of the last renewal", cond(corev1.ConditionUnknown, "NodeStatusUnknown", t0), ready, t0, false},
		{"positive control: a renewal after the Unknown makes it True", cond(corev1.ConditionUnknown, "NodeStatusUnknown", t0.Add(40*time.Second)), ready, t0.Add(41 * time.Second), true},
		{"a fresh heartbeat makes the operator's own False True", cond(corev1.ConditionFalse, fleetv1alpha1.ReasonHeartbeatMissed, now), ready, t0, true},
		{"facts missing make True False", cond(corev1.ConditionTrue, fleetv1alpha1.ReasonHeartbeatCurrent, t0), Desired(Observation{Heartbeat: t0, Unreported: []string{"disk"}}), t0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conds []corev1.NodeCondition
			other := corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionUnknown}
			conds = append(conds, other)
			if tc.current != nil {
				conds = append(conds, *tc.current)
			}
			before := append([]corev1.NodeCondition(nil), conds...)
			got, changed := Set(conds, tc.want, tc.heartbeat, now)
			if changed != tc.write {
				t.Fatalf("changed %v, want %v: %+v", changed, tc.write, got)
			}
			if len(conds) != len(before) || (tc.current != nil && conds[1] != before[1]) {
				t.Errorf("Set changed its argument: %+v", conds)
			}
			if !changed {
				if len(got) != len(conds) {
					t.Errorf("unchanged, yet %+v", got)
				}
				return
			}
			if len(got) != 2 || got[0] != other {
				t.Fatalf("the other conditions were not kept in place: %+v", got)
			}
			c := Find(got)
			if c.Status != tc.want.Status || c.Reason != tc.want.Reason || !c.LastTransitionTime.Time.Equal(now) {
				t.Errorf("got %+v, want %s %s at %s", c, tc.want.Status, tc.want.Reason, now)
			}
			switch {
			case tc.want.Status != corev1.ConditionTrue && tc.current != nil:
				if !c.LastHeartbeatTime.Equal(&tc.current.LastHeartbeatTime) {
					t.Errorf("LastHeartbeatTime %s, want the replaced condition's %s", c.LastHeartbeatTime, tc.current.LastHeartbeatTime)
				}
			case !c.LastHeartbeatTime.Time.Equal(tc.heartbeat):
				t.Errorf("LastHeartbeatTime %s, want the last renewal %s", c.LastHeartbeatTime, tc.heartbeat)
			}
		})
	}
}
