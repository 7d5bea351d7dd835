package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/taints"
)

// loop is one chassis in the quarantine loop, driven pass by pass: the test
// plays the agent, writing status.reported as the agent would.
type loop struct {
	t     *testing.T
	r     *Reconciler
	c     client.Client
	clock *clocktesting.FakeClock
}

func newLoop(t *testing.T, bound bool) *loop {
	t.Helper()
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	facts := good()
	facts.BootID = "boot-1"
	facts.Quota = &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK, BootID: "boot-1"}
	mn := macNode(facts)
	objs := []client.Object{class(), mn, heartbeat(t0), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c02a"}}}
	if bound {
		mn.Status.Binding = &fleetv1alpha1.Binding{LeaseNamespace: "tenant-a", LeaseName: "l", LeaseUID: "u",
			BoundAt: metav1.NewTime(t0), EarliestReleaseAt: metav1.NewTime(t0.Add(24 * time.Hour))}
		mn.Status.Slots = []fleetv1alpha1.Slot{{Namespace: "tenant-a", Name: "vm-1", UID: "i-1"}}
		objs = append(objs, &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "tenant-a", UID: "u"}})
	}
	r, c := reconciler(t, objs...)
	clock := r.Clock.(*clocktesting.FakeClock)
	clock.SetTime(t0)
	r.HeartbeatGrace = time.Hour
	r.Metrics = NewMetrics()
	l := &loop{t: t, r: r, c: c, clock: clock}
	l.pass()
	return l
}

func heartbeat(at time.Time) *coordinationv1.Lease {
	now := metav1.NewMicroTime(at)
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: fleetv1alpha1.HeartbeatNamespace, Name: "c02a"},
		Spec: coordinationv1.LeaseSpec{RenewTime: &now}}
}

// beat renews the agent's heartbeat at the fake clock's now.
func (l *loop) beat() {
	l.t.Helper()
	hb := &coordinationv1.Lease{}
	if err := l.c.Get(context.Background(), client.ObjectKey{Namespace: fleetv1alpha1.HeartbeatNamespace, Name: "c02a"}, hb); err != nil {
		l.t.Fatal(err)
	}
	now := metav1.NewMicroTime(l.clock.Now())
	hb.Spec.RenewTime = &now
	if err := l.c.Update(context.Background(), hb); err != nil {
		l.t.Fatal(err)
	}
}

// gaugeValue reads macrack_chassis_needs_attention for serial; 0 when the
// series does not exist.
func gaugeValue(t *testing.T, m *Metrics, serial string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "macrack_chassis_needs_attention" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "serial" && lp.GetValue() == serial {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

func (l *loop) pass() *fleetv1alpha1.MacNode { l.t.Helper(); return run(l.t, l.r, l.c) }

// agent changes what the agent reports, and runs a pass.
func (l *loop) agent(change func(*fleetv1alpha1.ReportedFacts)) *fleetv1alpha1.MacNode {
	l.t.Helper()
	mn := &fleetv1alpha1.MacNode{}
	if err := l.c.Get(context.Background(), client.ObjectKey{Name: "c02a"}, mn); err != nil {
		l.t.Fatal(err)
	}
	change(mn.Status.Reported)
	if err := l.c.Status().Update(context.Background(), mn); err != nil {
		l.t.Fatal(err)
	}
	return l.pass()
}

func (l *loop) stuck() *fleetv1alpha1.MacNode {
	l.t.Helper()
	return l.agent(func(f *fleetv1alpha1.ReportedFacts) {
		at := metav1.NewTime(l.clock.Now())
		f.Quota = &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaStuck, RunningVMs: 1, LastErrorCode: 6, LastErrorAt: &at, BootID: f.BootID}
	})
}

// stopped reports, as the agent does under the fence, no VM left.
func (l *loop) stopped() *fleetv1alpha1.MacNode {
	l.t.Helper()
	return l.inventory(nil, true)
}

// inventory reports vms; fenced says whether the agent took it under the
// current quarantine.
func (l *loop) inventory(vms []fleetv1alpha1.HostVM, fenced bool) *fleetv1alpha1.MacNode {
	l.t.Helper()
	mn := l.pass()
	var at *metav1.Time
	if q := mn.Status.Quarantine; fenced && q != nil {
		at = q.QuarantinedAt.DeepCopy()
	}
	return l.agent(func(f *fleetv1alpha1.ReportedFacts) {
		f.Inventory = &fleetv1alpha1.HostInventory{ObservedAt: metav1.NewTime(l.clock.Now()), VMs: vms, QuarantinedAt: at}
	})
}

func (l *loop) rebooted(boot string) *fleetv1alpha1.MacNode {
	l.t.Helper()
	return l.agent(func(f *fleetv1alpha1.ReportedFacts) { f.BootID = boot })
}

func (l *loop) probed(result fleetv1alpha1.ProbeResult) *fleetv1alpha1.MacNode {
	l.t.Helper()
	return l.agent(func(f *fleetv1alpha1.ReportedFacts) {
		state := fleetv1alpha1.QuotaOK
		if result != fleetv1alpha1.ProbePassed {
			state = fleetv1alpha1.QuotaStuck
		}
		at := metav1.NewTime(l.clock.Now())
		f.Quota = &fleetv1alpha1.QuotaReport{State: state, BootID: f.BootID, LastErrorCode: 6, LastErrorAt: &at,
			Probe: &fleetv1alpha1.QuotaProbe{BootID: f.BootID, Result: result, At: at}}
	})
}

// round takes the chassis once round the whole loop, from boot to the
// next boot, and returns it recovered.
func (l *loop) round(from, to string) *fleetv1alpha1.MacNode {
	l.t.Helper()
	l.beat()
	l.stuck()
	l.stopped()
	l.rebooted(to)
	mn := l.probed(fleetv1alpha1.ProbePassed)
	if mn.Status.Quarantine.Active() {
		l.t.Fatalf("round %s -> %s: still quarantined: %+v", from, to, mn.Status.Quarantine)
	}
	return mn
}

func condition(mn *fleetv1alpha1.MacNode, t string) metav1.Condition {
	if c := apimeta.FindStatusCondition(mn.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func nodeTaints(t *testing.T, c client.Client) []corev1.Taint {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "c02a"}, n); err != nil {
		t.Fatal(err)
	}
	return n.Spec.Taints
}

func hasTaint(ts []corev1.Taint, key string) bool {
	for _, t := range ts {
		if t.Key == key {
			return true
		}
	}
	return false
}

func drainEvents(r *Reconciler) string {
	var out []string
	rec := r.Recorder.(*events.FakeRecorder)
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}

// TestTheQuarantineLoopGivesTheChassisBackToItsLease walks every step,
// asserting at each that the binding and the slots are untouched.
func TestTheQuarantineLoopGivesTheChassisBackToItsLease(t *testing.T) {
	l := newLoop(t, true)
	before := l.pass()
	if before.Status.Phase != fleetv1alpha1.MacNodeLeased {
		t.Fatalf("the control: a bound, healthy chassis is Leased, got %s", before.Status.Phase)
	}
	if hasTaint(nodeTaints(t, l.c), taints.QuarantinedKey) {
		t.Fatal("the control: a healthy chassis' Node carries no quarantine taint")
	}
	same := func(step string, mn *fleetv1alpha1.MacNode) {
		t.Helper()
		if !equality.Semantic.DeepEqual(mn.Status.Binding, before.Status.Binding) || mn.Status.Binding == nil {
			t.Fatalf("%s: the binding changed: %+v", step, mn.Status.Binding)
		}
		if len(mn.Status.Slots) != 1 || mn.Status.Slots[0] != before.Status.Slots[0] {
			t.Fatalf("%s: the slots changed: %+v", step, mn.Status.Slots)
		}
	}
	drainEvents(l.r)

	// Detect and fence.
	mn := l.stuck()
	same("fence", mn)
	q := mn.Status.Quarantine
	if mn.Status.Phase != fleetv1alpha1.MacNodeQuarantined || !q.Active() || q.BootID != "boot-1" || q.RebootRequestedAt != nil {
		t.Fatalf("fence: phase %s quarantine %+v", mn.Status.Phase, q)
	}
	if !strings.Contains(q.Evidence, "code 6") || !strings.Contains(q.Evidence, "1 of 2 VMs") {
		t.Fatalf("fence: the evidence does not say what the agent saw: %q", q.Evidence)
	}
	if c := condition(mn, fleetv1alpha1.ConditionQuarantined); c.Status != metav1.ConditionTrue || c.Reason != fleetv1alpha1.ReasonStoppingVMs {
		t.Fatalf("fence: Quarantined %+v", c)
	}
	if c := condition(mn, fleetv1alpha1.ConditionReady); c.Status != metav1.ConditionFalse {
		t.Fatalf("fence: Ready %+v", c)
	}
	if !hasTaint(nodeTaints(t, l.c), taints.QuarantinedKey) || !hasTaint(nodeTaints(t, l.c), taints.LeasedKey) {
		t.Fatalf("fence: the Node keeps its lease's taint and gains the quarantine's, got %v", nodeTaints(t, l.c))
	}
	if ev := drainEvents(l.r); !strings.Contains(ev, fleetv1alpha1.ReasonQuarantineStarted) {
		t.Fatalf("fence: no QuarantineStarted Event in %q", ev)
	}

	// A pass with nothing new changes nothing: no reboot while VMs may run.
	if mn = l.pass(); mn.Status.Quarantine.RebootRequestedAt != nil {
		t.Fatal("stop: the reboot was asked before the agent reported its VMs stopped")
	}
	// An empty inventory not taken under this fence does not count, even
	// one stamped later than the quarantine by the agent's clock.
	l.clock.Step(time.Minute)
	if mn = l.inventory(nil, false); mn.Status.Quarantine.RebootRequestedAt != nil {
		t.Fatal("stop: an inventory not taken under the fence asked for the reboot")
	}
	mn = l.agent(func(f *fleetv1alpha1.ReportedFacts) {
		earlier := metav1.NewTime(mn.Status.Quarantine.QuarantinedAt.Add(-time.Hour))
		f.Inventory = &fleetv1alpha1.HostInventory{ObservedAt: metav1.NewTime(l.clock.Now()), QuarantinedAt: &earlier}
	})
	if mn.Status.Quarantine.RebootRequestedAt != nil {
		t.Fatal("stop: an inventory taken under an earlier quarantine asked for the reboot")
	}
	if mn = l.inventory([]fleetv1alpha1.HostVM{{UID: "i-1", State: "Running"}}, true); mn.Status.Quarantine.RebootRequestedAt != nil {
		t.Fatal("stop: the reboot was asked while the agent reports a VM running")
	}

	// Stopped: reboot.
	mn = l.stopped()
	same("reboot", mn)
	if mn.Status.Phase != fleetv1alpha1.MacNodeRebooting || mn.Status.Quarantine.RebootRequestedAt == nil {
		t.Fatalf("reboot: phase %s quarantine %+v", mn.Status.Phase, mn.Status.Quarantine)
	}
	// An agent that merely restarted, in the same boot, proves no reboot.
	if mn = l.rebooted("boot-1"); mn.Status.Quarantine.RebootedAt != nil {
		t.Fatal("reattach: the same boot id counted as a reboot")
	}
	// A new boot, but no probe yet.
	l.clock.Step(5 * time.Second)
	mn = l.rebooted("boot-2")
	if mn.Status.Quarantine.RebootedAt == nil || mn.Status.Quarantine.RecoveredAt != nil || mn.Status.Phase != fleetv1alpha1.MacNodeRebooting {
		t.Fatalf("reattach: %s %+v", mn.Status.Phase, mn.Status.Quarantine)
	}
	if c := condition(mn, fleetv1alpha1.ConditionQuarantined); !strings.Contains(c.Message, "probe VM in boot boot-2") {
		t.Fatalf("reattach: the condition does not say it waits for the probe: %q", c.Message)
	}
	// A probe of the old boot does not count.
	mn = l.agent(func(f *fleetv1alpha1.ReportedFacts) {
		f.Quota = &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK, BootID: "boot-1",
			Probe: &fleetv1alpha1.QuotaProbe{BootID: "boot-1", Result: fleetv1alpha1.ProbePassed, At: metav1.NewTime(l.clock.Now())}}
	})
	if mn.Status.Quarantine.RecoveredAt != nil {
		t.Fatal("reattach: a probe of the old boot recovered the chassis")
	}

	// Probe passed: back to the same lease.
	mn = l.probed(fleetv1alpha1.ProbePassed)
	same("recover", mn)
	q = mn.Status.Quarantine
	if mn.Status.Phase != fleetv1alpha1.MacNodeLeased || q.Active() || q.RecoveredAt == nil || q.RebootedAt == nil || q.QuarantinedAt.IsZero() {
		t.Fatalf("recover: phase %s quarantine %+v", mn.Status.Phase, q)
	}
	if c := condition(mn, fleetv1alpha1.ConditionQuarantined); c.Status != metav1.ConditionFalse || c.Reason != fleetv1alpha1.ReasonRecovered {
		t.Fatalf("recover: Quarantined %+v", c)
	}
	if hasTaint(nodeTaints(t, l.c), taints.QuarantinedKey) {
		t.Fatal("recover: the quarantine taint stayed")
	}
	ev := drainEvents(l.r)
	for _, want := range []string{fleetv1alpha1.ReasonRebootRequested, fleetv1alpha1.ReasonRebooted, fleetv1alpha1.ReasonRecovered} {
		if !strings.Contains(ev, want) {
			t.Errorf("no %s Event in %q", want, ev)
		}
	}
}

// TestARebootedHostThatComesBackNonCompliantDoesNotServe: a host that came
// back from its reboot with SIP off stays fenced, beside a control that
// recovers.
func TestARebootedHostThatComesBackNonCompliantDoesNotServe(t *testing.T) {
	for _, sip := range []bool{true, false} {
		l := newLoop(t, true)
		l.stuck()
		l.stopped()
		l.agent(func(f *fleetv1alpha1.ReportedFacts) { f.BootID, f.SIPEnabled = "boot-2", ptr.To(sip) })
		mn := l.probed(fleetv1alpha1.ProbePassed)
		if got := mn.Status.Quarantine.Active(); got == sip {
			t.Fatalf("SIP %v after the reboot: still quarantined %v, phase %s", sip, got, mn.Status.Phase)
		}
	}
}

// TestAStaleStuckReportStartsNoQuarantine: a Stuck of an earlier boot
// stays a report, beside a control of the current boot.
func TestAStaleStuckReportStartsNoQuarantine(t *testing.T) {
	for _, boot := range []string{"boot-0", "boot-1"} {
		l := newLoop(t, false)
		mn := l.agent(func(f *fleetv1alpha1.ReportedFacts) {
			f.Quota = &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaStuck, LastErrorCode: 6, BootID: boot}
		})
		if got, want := mn.Status.Quarantine.Active(), boot == "boot-1"; got != want {
			t.Fatalf("a Stuck of %s in boot-1: quarantined %v, want %v", boot, got, want)
		}
	}
}

// TestAFailedProbeIsAnotherQuarantine: stuck again after the reboot counts
// as a second quarantine, and the loop goes round again.
func TestAFailedProbeIsAnotherQuarantine(t *testing.T) {
	l := newLoop(t, true)
	l.stuck()
	l.stopped()
	l.rebooted("boot-2")
	mn := l.probed(fleetv1alpha1.ProbeFailed)
	q := mn.Status.Quarantine
	if !q.Active() || q.BootID != "boot-2" || q.RebootRequestedAt != nil || len(mn.Status.RecentQuarantines) != 2 {
		t.Fatalf("a failed probe: quarantine %+v recent %v", q, mn.Status.RecentQuarantines)
	}
	if mn.Status.Phase != fleetv1alpha1.MacNodeQuarantined {
		t.Fatalf("phase %s", mn.Status.Phase)
	}
}

// TestMoreThanThreeQuarantinesInADayNeedAPerson: the fourth in 24 hours
// is never rebooted, stays Quarantined with its lease gone, and the
// control, four spread over more than a day, is repaired each time.
func TestMoreThanThreeQuarantinesInADayNeedAPerson(t *testing.T) {
	t.Run("four within 24 hours", func(t *testing.T) {
		l := newLoop(t, true)
		for i, boot := range []string{"boot-1", "boot-2", "boot-3"} {
			l.clock.Step(time.Hour)
			l.round(boot, []string{"boot-2", "boot-3", "boot-4"}[i])
		}
		l.clock.Step(time.Hour)
		mn := l.stuck()
		q := mn.Status.Quarantine
		if !q.NeedsAttention || mn.Status.Phase != fleetv1alpha1.MacNodeQuarantined {
			t.Fatalf("the fourth: phase %s quarantine %+v", mn.Status.Phase, q)
		}
		if c := condition(mn, fleetv1alpha1.ConditionNeedsAttention); c.Status != metav1.ConditionTrue || c.Reason != fleetv1alpha1.ReasonTooManyQuarantines {
			t.Fatalf("NeedsAttention %+v", c)
		}
		if !strings.Contains(drainEvents(l.r), fleetv1alpha1.ReasonTooManyQuarantines) {
			t.Fatal("no TooManyQuarantines Event")
		}
		if got := gaugeValue(t, l.r.Metrics, "C02A"); got != 1 {
			t.Fatalf("macrack_chassis_needs_attention{serial=C02A} = %v, want 1", got)
		}
		mn = l.stopped()
		if mn.Status.Quarantine.RebootRequestedAt != nil || mn.Status.Phase != fleetv1alpha1.MacNodeQuarantined {
			t.Fatalf("a chassis that needs a person was asked to reboot: %+v", mn.Status.Quarantine)
		}
		// Its lease lets go: it never returns to the pool.
		mn.Status.Binding, mn.Status.Slots = nil, nil
		if err := l.c.Status().Update(context.Background(), mn); err != nil {
			t.Fatal(err)
		}
		l.clock.Step(48 * time.Hour)
		l.beat()
		if mn = l.rebooted("boot-9"); mn.Status.Phase != fleetv1alpha1.MacNodeQuarantined {
			t.Fatalf("unbound, a day later and rebooted by hand, it is %s, want Quarantined", mn.Status.Phase)
		}
	})
	t.Run("four over more than 24 hours", func(t *testing.T) {
		l := newLoop(t, true)
		boots := []string{"boot-1", "boot-2", "boot-3", "boot-4", "boot-5"}
		for i := range 4 {
			l.clock.Step(9 * time.Hour)
			l.beat()
			mn := l.round(boots[i], boots[i+1])
			if mn.Status.Quarantine.NeedsAttention {
				t.Fatalf("round %d, 9 hours apart: NeedsAttention", i+1)
			}
		}
		if got := gaugeValue(t, l.r.Metrics, "C02A"); got != 0 {
			t.Fatalf("macrack_chassis_needs_attention{serial=C02A} = %v, want none", got)
		}
	})
}
