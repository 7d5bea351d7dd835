package instances

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/agent/report"
	"github.com/boualleiguie/macrack-operator/internal/agent/simguest"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// fakeBoot is the host's boot id, which a test changes to model a reboot.
type fakeBoot struct {
	mu sync.Mutex
	id string
}

func (b *fakeBoot) BootID(context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.id, nil
}

func (b *fakeBoot) set(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.id = id
}

// fakeRebooter counts the reboots it was asked for.
type fakeRebooter struct {
	mu sync.Mutex
	n  int
}

func (f *fakeRebooter) Reboot(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return nil
}

func (f *fakeRebooter) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// countingLauncher counts the launches of each helper.
type countingLauncher struct {
	helper.Launcher
	mu       sync.Mutex
	launches map[string]int
}

func (l *countingLauncher) Launch(ctx context.Context, uid string, spec vmspec.VMSpec) (string, error) {
	l.mu.Lock()
	l.launches[uid]++
	l.mu.Unlock()
	return l.Launcher.Launch(ctx, uid, spec)
}

func (l *countingLauncher) count(uid string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.launches[uid]
}

// quarantineRig is a rig whose host has a boot id, a rebooter, and VMs of
// a driver built from opts.
type quarantineRig struct {
	*rig
	boot     *fakeBoot
	rebooter *fakeRebooter
	launches *countingLauncher
	rebooted int
}

func newQuarantineRig(t *testing.T, opts []sim.Option, names ...string) *quarantineRig {
	t.Helper()
	rg := newRig(t, names...)
	drv := sim.New(rg.kernel, append([]sim.Option{sim.WithBootTime(0), sim.WithShutdownTime(0)}, opts...)...)
	l, err := helper.NewInProcessLauncher(filepath.Join(rg.r.Disks.Root, "qrun"), drv, helper.WithStopGrace(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	qr := &quarantineRig{rig: rg, boot: &fakeBoot{id: "boot-1"}, rebooter: &fakeRebooter{},
		launches: &countingLauncher{Launcher: l, launches: map[string]int{}}}
	rg.launcher = l
	rg.r.Launcher, rg.r.BootID, rg.r.Rebooter = qr.launches, qr.boot, qr.rebooter
	rg.r.Rebooted = func() { qr.rebooted++ }
	return qr
}

// withGuest is a sim driver whose guests run the sim guest agent.
func withGuest(t *testing.T) []sim.Option {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return []sim.Option{sim.WithGuestHandler(simguest.Handler(ctx, simguest.Reporter{Clock: clock.RealClock{}}, logr.Discard()))}
}

// setStatus changes the MacNode's status as the operator would.
func (rg *rig) setStatus(change func(*fleetv1alpha1.MacNodeStatus)) {
	rg.t.Helper()
	mn := rg.macNode()
	change(&mn.Status)
	if err := rg.c.Status().Update(context.Background(), mn); err != nil {
		rg.t.Fatal(err)
	}
}

// quarantine is the operator's step 1: the chassis fenced for a quota that
// stuck in boot.
func (rg *rig) quarantine(boot string) {
	rg.setStatus(func(st *fleetv1alpha1.MacNodeStatus) {
		st.Phase = fleetv1alpha1.MacNodeQuarantined
		st.Quarantine = &fleetv1alpha1.QuarantineStatus{BootID: boot, Evidence: "code 6 with 1 of 2 VMs running",
			QuarantinedAt: metav1.NewTime(time.Now().Add(-time.Minute).UTC().Truncate(time.Second))}
	})
}

// requestReboot is the operator's step 2.
func (rg *rig) requestReboot() {
	rg.setStatus(func(st *fleetv1alpha1.MacNodeStatus) {
		st.Phase = fleetv1alpha1.MacNodeRebooting
		now := metav1.Now()
		st.Quarantine.RebootRequestedAt = &now
	})
}

func (rg *rig) reconcileQuarantine() error {
	rg.t.Helper()
	_, err := rg.r.ReconcileQuarantine(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: testNode}})
	return err
}

// drainEvents returns the Events recorded so far.
func (rg *rig) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-rg.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// stickQuota reproduces the field bug on the rig's host: ci-2's VM
// stopped but stayed counted, and its start is refused with code 6 while
// ci-1 runs.
func (qr *quarantineRig) stickQuota() {
	qr.t.Helper()
	qr.run("ci-1")
	if _, err := qr.kernel.StickSlots(1); err != nil {
		qr.t.Fatal(err)
	}
	if err := qr.reconcile("ci-2"); err != nil {
		qr.t.Fatal(err)
	}
	if q := qr.quota(); q == nil || q.State != fleetv1alpha1.QuotaStuck {
		qr.t.Fatalf("quota %+v, want Stuck", q)
	}
}

// A Stuck report carries its boot, and outlives an agent restart in that
// boot: the facts source's OK must not undo it. After a reboot it is
// dropped, since the reboot reset the counter.
func TestTheQuotaReportSurvivesARestartOfTheAgentButNotAReboot(t *testing.T) {
	qr := newQuarantineRig(t, nil, "ci-1", "ci-2")
	qr.stickQuota()
	if q := qr.quota(); q.BootID != "boot-1" {
		t.Fatalf("the Stuck report is about boot %q, want boot-1", q.BootID)
	}
	restarted := func() *Instances {
		return &Instances{Client: qr.c, NodeName: testNode, Launcher: qr.launches, Disks: qr.r.Disks, Clock: clock.RealClock{},
			BootID: qr.boot, Log: logr.Discard(), Report: &report.Reporter{Client: qr.c, NodeName: testNode, Log: logr.Discard()}}
	}

	again := restarted()
	if q := again.LastQuota(); q != nil {
		t.Fatalf("positive control: a fresh agent knows quota %+v before it loads one", q)
	}
	if err := again.LoadQuota(context.Background()); err != nil {
		t.Fatal(err)
	}
	if q := again.LastQuota(); q == nil || q.State != fleetv1alpha1.QuotaStuck || q.BootID != "boot-1" || q.RunningVMs != 1 {
		t.Fatalf("after a restart in the same boot the agent's quota is %+v, want the Stuck of boot-1", q)
	}

	qr.boot.set("boot-2")
	rebooted := restarted()
	if err := rebooted.LoadQuota(context.Background()); err != nil {
		t.Fatal(err)
	}
	if q := rebooted.LastQuota(); q != nil {
		t.Fatalf("after a reboot the agent keeps quota %+v of the boot before", q)
	}
	if _, err := os.Stat(rebooted.statePath(quotaFile)); !os.IsNotExist(err) {
		t.Errorf("the stale quota report is still in the state directory (%v)", err)
	}
}

// A quarantined chassis' VM is stopped, gentlest first: the guest agent is
// asked to shut macOS down; a guest that cannot be reached gets the
// framework's requestStop; a hung one is forced off, only once the grace
// period has passed. How is recorded, the disk record agrees, and no VM
// starts again until the phase is lifted.
func TestAQuarantinedChassisStopsItsVMsGentlestFirst(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      func(*testing.T) []sim.Option
		method    computev1alpha1.StopMethod
		disk      sim.DiskState
		fullGrace bool
	}{
		{"a guest agent that shuts macOS down", withGuest, computev1alpha1.StopGuestShutdown, sim.DiskClean, false},
		{"a guest without a reachable guest agent", func(*testing.T) []sim.Option { return nil }, computev1alpha1.StopRequestStop, sim.DiskClean, false},
		{"a hung guest", func(t *testing.T) []sim.Option { return append(withGuest(t), sim.WithGuestIgnoringShutdown()) },
			computev1alpha1.StopForced, sim.DiskDirty, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			qr := newQuarantineRig(t, tc.opts(t), "ci-1")
			qr.run("ci-1")
			qr.quarantine("boot-1")
			began := time.Now()
			if err := qr.reconcile("ci-1"); err != nil {
				t.Fatal(err)
			}
			took := time.Since(began)
			rt := qr.instance("ci-1").Status.Runtime
			if rt == nil || rt.Phase != computev1alpha1.VMStopped {
				t.Fatalf("runtime %+v, want Stopped", rt)
			}
			if rt.LastStop == nil || rt.LastStop.Method != tc.method || rt.LastStop.Reason != computev1alpha1.StopReasonChassisQuarantined || rt.LastStop.At.IsZero() {
				t.Fatalf("lastStop %+v, want %s for %s", rt.LastStop, tc.method, computev1alpha1.StopReasonChassisQuarantined)
			}
			for _, want := range []string{"quarantined", "kernel VM quota stuck", "restarts after"} {
				if !strings.Contains(rt.Message, want) {
					t.Errorf("message %q does not say %q", rt.Message, want)
				}
			}
			if st, err := sim.ReadDiskState(filepath.Join(qr.r.Disks.InstanceDir("uid-ci-1"), "disk.img")); err != nil || st != tc.disk {
				t.Errorf("disk record %q (%v), want %q", st, err, tc.disk)
			}
			if tc.fullGrace && took < qr.r.StopGrace*9/10 {
				t.Errorf("the VM was forced off after %s, before the grace period of %s", took, qr.r.StopGrace)
			}
			if !tc.fullGrace && took >= qr.r.StopGrace {
				t.Errorf("a guest that honoured the stop took %s, the whole grace period", took)
			}
			if qr.helperRuns("ci-1") {
				t.Error("the stopped VM's helper runs on: the inventory would list a VM")
			}
			if inv := qr.macNode().Status.Reported.Inventory; inv == nil || len(inv.VMs) != 0 {
				t.Errorf("inventory %+v after the stop, want one reported at once, without VMs", inv)
			}
			if n, _ := qr.kernel.Active(); n != 0 {
				t.Errorf("the kernel counts %d VMs", n)
			}

			// Fenced, the VM is not started again, whatever the loop sees.
			qr.requestReboot()
			for range 2 {
				if err := qr.reconcile("ci-1"); err != nil {
					t.Fatal(err)
				}
			}
			if qr.helperRuns("ci-1") {
				t.Fatal("a VM started on a chassis that is Rebooting")
			}
			if rt := qr.instance("ci-1").Status.Runtime; rt.LastStop.Method != tc.method || !strings.Contains(rt.Message, "rebooting") {
				t.Errorf("runtime %+v while Rebooting, want the last stop kept and the reboot told", rt)
			}
			// The positive control: the phase lifted, the VM runs again.
			qr.setStatus(func(st *fleetv1alpha1.MacNodeStatus) { st.Phase = fleetv1alpha1.MacNodeLeased })
			qr.run("ci-1")
			if rt := qr.instance("ci-1").Status.Runtime; rt.LastStop == nil || rt.LastStop.Method != tc.method {
				t.Errorf("the running VM lost its last stop's record: %+v", rt.LastStop)
			}
		})
	}
}

// The agent reboots the host only when asked (phase Rebooting,
// rebootRequestedAt), for the boot whose quota stuck, with no VM running,
// and once; it tells on its MacNode first.
func TestTheHostRebootsOnlyWhenAskedForItsBootWithNoVMRunning(t *testing.T) {
	qr := newQuarantineRig(t, nil, "ci-1")
	qr.run("ci-1")
	qr.quarantine("boot-1")
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	if n := qr.rebooter.count(); n != 0 {
		t.Fatalf("rebooted %d times before the operator asked", n)
	}

	qr.requestReboot()
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	if n := qr.rebooter.count(); n != 0 {
		t.Fatalf("rebooted %d times with a VM running", n)
	}

	if err := qr.reconcile("ci-1"); err != nil { // the fence stops it
		t.Fatal(err)
	}
	qr.drainEvents()
	for range 2 {
		if err := qr.reconcileQuarantine(); err != nil {
			t.Fatal(err)
		}
	}
	if n := qr.rebooter.count(); n != 1 || qr.rebooted != 1 {
		t.Fatalf("rebooted %d times (the agent told %d), want once", n, qr.rebooted)
	}
	events := qr.drainEvents()
	if len(events) == 0 || !strings.Contains(events[0], fleetv1alpha1.ReasonRebootRequested) || !strings.Contains(events[0], "stuck kernel VM quota") {
		t.Errorf("events %v, want the reboot told on the MacNode", events)
	}
}

// An agent killed after it stopped a VM, before it recorded how, leaves
// the VM's helper: the only one that still knows. The reboot waits for the
// fence to record the stop, since it would end the helper.
func TestTheHostIsNotRebootedBeforeEveryStopIsOnRecord(t *testing.T) {
	qr := newQuarantineRig(t, withGuest(t), "ci-1")
	qr.run("ci-1")
	qr.quarantine("boot-1")
	// The killed agent's stop: the VM is down, nothing is written.
	method, err := qr.helperOf("ci-1").StopVM(context.Background(), time.Second)
	if err != nil || method == "" {
		t.Fatalf("stopping the VM through its helper: %q, %v", method, err)
	}
	if rt := qr.instance("ci-1").Status.Runtime; rt.LastStop != nil {
		t.Fatalf("lastStop %+v before the fence ran, want none", rt.LastStop)
	}
	qr.requestReboot()
	for range 2 {
		if err := qr.reconcileQuarantine(); err != nil {
			t.Fatal(err)
		}
	}
	if n := qr.rebooter.count(); n != 0 {
		t.Fatalf("rebooted %d times with a stop not on record", n)
	}

	// Positive control: the fence records the stop and removes the
	// helper; then the host reboots, and the record is there.
	if err := qr.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	if n := qr.rebooter.count(); n != 1 {
		t.Fatalf("rebooted %d times once the stop was recorded, want once", n)
	}
	if rt := qr.instance("ci-1").Status.Runtime; rt.LastStop == nil || rt.LastStop.Method != computev1alpha1.StopMethod(method) ||
		rt.LastStop.Reason != computev1alpha1.StopReasonChassisQuarantined {
		t.Errorf("lastStop %+v, want %s for %s", rt.LastStop, method, computev1alpha1.StopReasonChassisQuarantined)
	}
}

func TestTheHostIsNotRebootedForAnotherBootNorWhenItNeedsAttention(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*fleetv1alpha1.MacNodeStatus)
	}{
		{"the quota stuck in an earlier boot", func(st *fleetv1alpha1.MacNodeStatus) { st.Quarantine.BootID = "boot-0" }},
		{"the chassis needs a person", func(st *fleetv1alpha1.MacNodeStatus) { st.Quarantine.NeedsAttention = true }},
		{"the phase is not Rebooting", func(st *fleetv1alpha1.MacNodeStatus) { st.Phase = fleetv1alpha1.MacNodeQuarantined }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			qr := newQuarantineRig(t, nil, "ci-1")
			qr.quarantine("boot-1")
			qr.requestReboot()
			qr.setStatus(tc.change)
			for range 2 {
				_ = qr.reconcileQuarantine()
			}
			if n := qr.rebooter.count(); n != 0 {
				t.Fatalf("rebooted %d times", n)
			}
		})
	}
	// Without a rebooter, the agent says it cannot, and reboots nothing.
	qr := newQuarantineRig(t, nil, "ci-1")
	qr.r.Rebooter = nil
	qr.quarantine("boot-1")
	qr.requestReboot()
	if err := qr.reconcileQuarantine(); !errors.Is(err, ErrNoRebooter) {
		t.Fatalf("reconcile: %v, want ErrNoRebooter", err)
	}
}

// rebootedQuarantine is a chassis whose quota stuck in boot-1, rebooted
// into boot-2, waiting for its probe.
func rebootedQuarantine(t *testing.T, opts []sim.Option, names ...string) *quarantineRig {
	qr := newQuarantineRig(t, opts, names...)
	qr.quarantine("boot-1")
	qr.requestReboot()
	qr.setStatus(func(st *fleetv1alpha1.MacNodeStatus) {
		now := metav1.Now()
		st.Quarantine.RebootedAt = &now
	})
	qr.boot.set("boot-2")
	return qr
}

// After the reboot, one probe VM starts and stops, alone, from the cached
// golden, and the quota of the new boot is reported OK with the probe
// Passed. It is not probed again in that boot.
func TestTheProbeAfterARebootReportsAHealthyQuota(t *testing.T) {
	qr := rebootedQuarantine(t, nil, "ci-1")
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	q := qr.quota()
	if q == nil || q.State != fleetv1alpha1.QuotaOK || q.BootID != "boot-2" || q.RunningVMs != 0 {
		t.Fatalf("quota %+v, want OK in boot-2 with no VM running", q)
	}
	if p := q.Probe; p == nil || p.BootID != "boot-2" || p.Result != fleetv1alpha1.ProbePassed || p.Image != testImage || p.At.IsZero() {
		t.Fatalf("probe %+v, want Passed in boot-2 from golden %s", q.Probe, testImage)
	}
	if q.LastErrorCode != 0 || q.LastErrorAt != nil {
		t.Errorf("the healthy quota keeps an old error: %+v", q)
	}
	if n, _ := qr.kernel.MaxActive(); n != 1 {
		t.Errorf("the kernel counted %d VMs at once, want the probe alone", n)
	}
	if n, _ := qr.kernel.Active(); n != 0 {
		t.Errorf("the kernel counts %d VMs after the probe", n)
	}
	if running, _ := qr.launcher.Running(); len(running) != 0 {
		t.Errorf("helpers %v left after the probe", running)
	}
	if _, err := os.Stat(qr.r.statePath(probeDir)); !os.IsNotExist(err) {
		t.Errorf("the probe's disk is left (%v)", err)
	}
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	if n := qr.launches.count(ProbeUID); n != 1 {
		t.Errorf("%d probes in one boot, want 1", n)
	}
	// Positive control: the fence still holds the instance until the
	// operator lifts the phase.
	if err := qr.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	if qr.helperRuns("ci-1") {
		t.Error("a tenant VM started before the operator lifted the phase")
	}
}

// The kernel refuses the probe with code 6 though no VM runs: the quota
// stuck again, in the new boot; no further probe in that boot.
func TestAProbeRefusedWithCode6ReportsTheQuotaStuckAgain(t *testing.T) {
	qr := rebootedQuarantine(t, nil, "ci-1")
	if _, err := qr.kernel.StickSlots(sim.QuotaLimit); err != nil {
		t.Fatal(err)
	}
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	q := qr.quota()
	if q == nil || q.State != fleetv1alpha1.QuotaStuck || q.BootID != "boot-2" || q.LastErrorCode != driver.CodeVirtualMachineLimitExceeded {
		t.Fatalf("quota %+v, want Stuck in boot-2 with code 6", q)
	}
	if p := q.Probe; p == nil || p.Result != fleetv1alpha1.ProbeFailed || p.BootID != "boot-2" || !strings.Contains(p.Message, "code 6") {
		t.Fatalf("probe %+v, want Failed in boot-2 saying code 6", q.Probe)
	}
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	if n := qr.launches.count(ProbeUID); n != 1 {
		t.Errorf("%d probes, want 1: only a reboot helps a quota stuck again", n)
	}
}

// The probe never runs beside a VM: it would be a third.
func TestTheProbeRefusesToRunBesideAVM(t *testing.T) {
	qr := rebootedQuarantine(t, nil, "ci-1")
	qr.setStatus(func(st *fleetv1alpha1.MacNodeStatus) { st.Phase = fleetv1alpha1.MacNodeLeased })
	qr.run("ci-1")
	qr.setStatus(func(st *fleetv1alpha1.MacNodeStatus) { st.Phase = fleetv1alpha1.MacNodeRebooting })
	if err := qr.reconcileQuarantine(); !errors.Is(err, ErrVMsRunning) {
		t.Fatalf("reconcile: %v, want ErrVMsRunning", err)
	}
	if n := qr.launches.count(ProbeUID); n != 0 {
		t.Fatalf("a probe helper was launched beside a running VM")
	}
	// Positive control: once the fence stopped the VM, the probe runs.
	if err := qr.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	if q := qr.quota(); !probed(q, "boot-2") {
		t.Fatalf("quota %+v, want a Passed probe", q)
	}
}

// With no Ready golden, the probe fails clearly on a Mac, and is tried
// again later; the sim boots it from an empty disk.
func TestAProbeWithoutAGolden(t *testing.T) {
	qr := rebootedQuarantine(t, nil)
	qr.r.Images = nil
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	q := qr.quota()
	if q == nil || q.Probe == nil || q.Probe.Result != fleetv1alpha1.ProbeFailed || !strings.Contains(q.Probe.Message, ErrNoProbeGolden.Error()) {
		t.Fatalf("quota %+v, want a Failed probe saying %q", q, ErrNoProbeGolden)
	}
	if q.State != fleetv1alpha1.QuotaOK {
		t.Errorf("a probe that proved nothing reported the quota %s", q.State)
	}
	if n := qr.launches.count(ProbeUID); n != 0 {
		t.Errorf("a probe VM was launched without a disk")
	}

	qr.r.SimKernel = qr.kernel
	qr.r.ProbeRetry = time.Nanosecond
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	if q := qr.quota(); !probed(q, "boot-2") || q.Probe.Image != "" {
		t.Fatalf("quota %+v, want a Passed probe with no image in the sim", q)
	}
}

// The sim's quota-stick fault: the kernel fills with stuck slots and a
// start follows at once, refused with code 6 while one of two VMs runs:
// Stuck. Each annotation value is handled once, across restarts.
func TestTheSimQuotaStickFaultIsReportedStuck(t *testing.T) {
	qr := newQuarantineRig(t, nil, "ci-1", "ci-2")
	qr.run("ci-1")
	annotate := func(v string) {
		mn := qr.macNode()
		mn.Annotations = map[string]string{fleetv1alpha1.SimQuotaStickAnnotation: v}
		if err := qr.c.Update(context.Background(), mn); err != nil {
			t.Fatal(err)
		}
	}
	annotate("t1")
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	if q := qr.quota(); q != nil {
		t.Fatalf("positive control: quota %+v reported by an agent whose driver is not the sim", q)
	}

	qr.r.SimKernel = qr.kernel
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	q := qr.quota()
	if q == nil || q.State != fleetv1alpha1.QuotaStuck || q.RunningVMs != 1 || q.BootID != "boot-1" || q.LastErrorCode != 6 {
		t.Fatalf("quota %+v, want Stuck in boot-1 with one VM running and code 6", q)
	}
	if n, _ := qr.kernel.Active(); n != sim.QuotaLimit {
		t.Fatalf("the kernel counts %d, want the limit: one VM and one stuck slot", n)
	}
	if !qr.helperRuns("ci-1") {
		t.Error("the fault stopped a tenant's VM")
	}
	// Handled once, by an agent restarted too.
	qr.r.quarantine = quarantineState{}
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	if n := qr.launches.count(ProbeUID); n != 1 {
		t.Fatalf("%d starts for one annotation value, want 1", n)
	}
}

// With every slot of the class running a VM there is no room to stick:
// the fault waits.
func TestTheSimQuotaStickFaultWaitsForRoom(t *testing.T) {
	qr := newQuarantineRig(t, nil, "ci-1", "ci-2")
	qr.r.SimKernel = qr.kernel
	qr.run("ci-1")
	qr.run("ci-2")
	mn := qr.macNode()
	mn.Annotations = map[string]string{fleetv1alpha1.SimQuotaStickAnnotation: "t1"}
	if err := qr.c.Update(context.Background(), mn); err != nil {
		t.Fatal(err)
	}
	res, err := qr.r.ReconcileQuarantine(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: testNode}})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter == 0 || qr.quota() != nil || qr.launches.count(ProbeUID) != 0 {
		t.Fatalf("requeue %s, quota %+v, %d starts: want a wait and nothing else", res.RequeueAfter, qr.quota(), qr.launches.count(ProbeUID))
	}
}

// The reaper leaves a probe's helper to the probe, and the inventory does
// not list it: it is no tenant's VM.
func TestTheReaperAndTheInventoryLeaveTheProbeAlone(t *testing.T) {
	qr := newQuarantineRig(t, nil)
	qr.r.SimKernel = qr.kernel
	spec, _, err := qr.r.probeSpec(false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qr.launches.Launch(context.Background(), ProbeUID, spec); err != nil {
		t.Fatal(err)
	}
	qr.reap()
	running, _ := qr.launcher.Running()
	if _, ok := running[ProbeUID]; !ok {
		t.Fatal("the reaper stopped the probe's helper")
	}
	if inv := qr.macNode().Status.Reported.Inventory; inv == nil || len(inv.VMs) != 0 {
		t.Fatalf("inventory %+v, want no VM", inv)
	}
	// A new agent cleans up a probe an earlier one left.
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	if running, _ := qr.launcher.Running(); len(running) != 0 {
		t.Fatalf("the probe left by an earlier agent runs on: %v", running)
	}
}

// An inventory unchanged since before the quarantine is reported again:
// the operator trusts only one observed since.
func TestAnInventoryOlderThanTheQuarantineIsReportedAgain(t *testing.T) {
	qr := newQuarantineRig(t, nil, "ci-1")
	qr.reap()
	qr.setStatus(func(st *fleetv1alpha1.MacNodeStatus) {
		st.Reported.Inventory.ObservedAt = metav1.NewTime(time.Now().Add(-time.Hour).UTC().Truncate(time.Second))
	})
	qr.quarantine("boot-1")
	if err := qr.reconcileQuarantine(); err != nil {
		t.Fatal(err)
	}
	mn := qr.macNode()
	if inv := mn.Status.Reported.Inventory; inv.ObservedAt.Before(&mn.Status.Quarantine.QuarantinedAt) {
		t.Fatalf("inventory observed at %s, before the quarantine at %s", inv.ObservedAt, mn.Status.Quarantine.QuarantinedAt)
	}
}
