package lease

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// TestTheTenantSeesItsChassisQuarantineInWords: each step of the loop
// gives the lease's ChassisAvailable its own reason and a message that
// says what happens and why; a healthy chassis, the control, is available.
func TestTheTenantSeesItsChassisQuarantineInWords(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	node := func(phase fleetv1alpha1.MacNodePhase, q *fleetv1alpha1.QuarantineStatus) *fleetv1alpha1.MacNode {
		return &fleetv1alpha1.MacNode{Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02A"},
			Status: fleetv1alpha1.MacNodeStatus{Phase: phase, Quarantine: q}}
	}
	for _, tc := range []struct {
		name   string
		node   *fleetv1alpha1.MacNode
		status metav1.ConditionStatus
		reason string
		says   string
	}{
		{"healthy", node(fleetv1alpha1.MacNodeLeased, nil), metav1.ConditionTrue, leasingv1alpha1.ReasonAvailable, "serves this lease"},
		{"quarantined", node(fleetv1alpha1.MacNodeQuarantined, &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at}),
			metav1.ConditionFalse, leasingv1alpha1.ReasonChassisQuarantined, "same earliestReleaseAt"},
		{"rebooting", node(fleetv1alpha1.MacNodeRebooting, &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at, RebootRequestedAt: &at}),
			metav1.ConditionFalse, leasingv1alpha1.ReasonChassisRebooting, "instances start again"},
		{"needs a person", node(fleetv1alpha1.MacNodeQuarantined, &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at, NeedsAttention: true}),
			metav1.ConditionFalse, leasingv1alpha1.ReasonChassisNeedsAttention, "a person must look"},
		{"recovered", node(fleetv1alpha1.MacNodeLeased, &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at, RecoveredAt: &at}),
			metav1.ConditionTrue, leasingv1alpha1.ReasonAvailable, "recovered from a quarantine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := chassisAvailable(tc.node)
			if c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.says) || !strings.Contains(c.Message, "C02A") {
				t.Fatalf("got %s %s %q, want %s %s saying %q and the serial", c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.says)
			}
		})
	}
}

// TestAReleaseWaitsOnlyForAChassisThatWillComeBack: a release waits for a
// chassis mid-quarantine, and for nothing else: not one that needs a
// person, not a retired one (its agent is dead), not a recovered one.
func TestAReleaseWaitsOnlyForAChassisThatWillComeBack(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name    string
		q       *fleetv1alpha1.QuarantineStatus
		retired bool
		waits   bool
	}{
		{"never quarantined", nil, false, false},
		{"mid-quarantine", &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at}, false, true},
		{"recovered", &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at, RecoveredAt: &at}, false, false},
		{"needs a person", &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at, NeedsAttention: true}, false, false},
		{"retired mid-quarantine", &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &fleetv1alpha1.MacNode{Spec: fleetv1alpha1.MacNodeSpec{Retired: tc.retired}, Status: fleetv1alpha1.MacNodeStatus{Quarantine: tc.q}}
			if got := waitsForRecovery(n); got != tc.waits {
				t.Fatalf("waits %v, want %v", got, tc.waits)
			}
		})
	}
}

// TestEachQuarantineStepIsAnEventOnTheLease: the tenant gets one Event per
// step of the loop, the rebooting step included, though only the first and
// the last flip ChassisAvailable; a pass that changes nothing, the
// control, emits none.
func TestEachQuarantineStepIsAnEventOnTheLease(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Recorder: rec}
	lease := &leasingv1alpha1.MacNodeLease{}
	node := &fleetv1alpha1.MacNode{Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02A"}}
	steps := []struct {
		phase fleetv1alpha1.MacNodePhase
		q     *fleetv1alpha1.QuarantineStatus
		want  string // the Event's reason; "" for none
	}{
		{fleetv1alpha1.MacNodeLeased, nil, ""},
		{fleetv1alpha1.MacNodeQuarantined, &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at}, leasingv1alpha1.ReasonChassisQuarantined},
		{fleetv1alpha1.MacNodeQuarantined, &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at}, ""},
		{fleetv1alpha1.MacNodeRebooting, &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at, RebootRequestedAt: &at}, leasingv1alpha1.ReasonChassisRebooting},
		{fleetv1alpha1.MacNodeRebooting, &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at, RebootRequestedAt: &at, RebootedAt: &at}, ""},
		{fleetv1alpha1.MacNodeLeased, &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at, RebootRequestedAt: &at, RebootedAt: &at, RecoveredAt: &at}, leasingv1alpha1.ReasonChassisRecovered},
		{fleetv1alpha1.MacNodeLeased, &fleetv1alpha1.QuarantineStatus{QuarantinedAt: at, RebootRequestedAt: &at, RebootedAt: &at, RecoveredAt: &at}, ""},
	}
	for i, step := range steps {
		node.Status.Phase, node.Status.Quarantine = step.phase, step.q
		r.setChassisAvailable(&scope{lease: lease, node: node}, 1, at)
		var got string
		select {
		case e := <-rec.Events:
			got = e
		default:
		}
		if step.want == "" && got != "" || step.want != "" && !strings.Contains(got, " "+step.want+" ") {
			t.Fatalf("step %d (%s): got Event %q, want reason %q", i, step.phase, got, step.want)
		}
	}
}
