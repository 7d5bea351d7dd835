package instances

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
)

// statusWrites are the agent's writes of the instance's status from the
// mark-th write on, each as the runtime it sent.
func (rg *rig) statusWrites(mark int) []computev1alpha1.RuntimeStatus {
	rg.t.Helper()
	var out []computev1alpha1.RuntimeStatus
	for _, w := range rg.recorded()[mark:] {
		if w.kind != "MacOSInstance" || w.subresource != "status" {
			continue
		}
		var body struct {
			Status struct {
				Runtime computev1alpha1.RuntimeStatus `json:"runtime"`
			} `json:"status"`
		}
		if err := json.Unmarshal(w.body, &body); err != nil {
			rg.t.Fatalf("status write %s: %v", w.body, err)
		}
		out = append(out, body.Status.Runtime)
	}
	return out
}

// gone reports whether the instance name was let go.
func (rg *rig) gone(name string) bool {
	rg.t.Helper()
	err := rg.c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: name}, &computev1alpha1.MacOSInstance{})
	return apierrors.IsNotFound(err)
}

// A deleted instance's VM is stopped, then its disk wiped at once: the
// stop (phase, lastStop) and the wipe's evidence go on record in one status
// write, before the finalizer comes off (issue 39: one write a life fewer).
func TestADeletedInstancesStopAndWipeAreOneStatusWrite(t *testing.T) {
	rg := newRig(t, "ci-1")
	rg.run("ci-1")
	mark := len(rg.recorded())
	if err := rg.c.Delete(context.Background(), rg.instance("ci-1")); err != nil {
		t.Fatal(err)
	}
	if err := rg.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	if !rg.gone("ci-1") || !rg.r.Disks.Wiped("uid-ci-1") {
		t.Fatal("the instance was not wiped and let go")
	}
	got := rg.statusWrites(mark)
	if len(got) != 1 {
		t.Fatalf("%d status writes through the teardown, want 1: %+v", len(got), got)
	}
	rt := got[0]
	if rt.Phase != computev1alpha1.VMStopped || rt.LastStop == nil || rt.LastStop.Reason != computev1alpha1.StopReasonInstanceDeleted ||
		rt.LastStop.Method == "" || rt.WipedAt == nil || rt.Wipe == nil || rt.Wipe.UID != "uid-ci-1" {
		t.Fatalf("the write %+v, want Stopped, the deletion's stop and the wipe's evidence", rt)
	}
	if s, err := rg.r.keptStop("uid-ci-1"); err != nil || s != nil {
		t.Errorf("the stop %+v (%v) is still kept after it went on record", s, err)
	}
}

// The positive control: a VM that stops while its instance lives on (its
// chassis quarantined) is reported Stopped at once, with how, and no wipe.
func TestAStoppedVMOfALiveInstanceIsReportedAtOnce(t *testing.T) {
	qr := newQuarantineRig(t, nil, "ci-1")
	qr.run("ci-1")
	mark := len(qr.recorded())
	qr.quarantine("boot-1")
	if err := qr.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	got := qr.statusWrites(mark)
	if len(got) == 0 {
		t.Fatal("no status write for the stop")
	}
	last := got[len(got)-1]
	if last.Phase != computev1alpha1.VMStopped || last.LastStop == nil ||
		last.LastStop.Reason != computev1alpha1.StopReasonChassisQuarantined || last.WipedAt != nil {
		t.Fatalf("the stop's write %+v, want Stopped with its stop and no wipe", last)
	}
	if rt := qr.instance("ci-1").Status.Runtime; rt.Phase != computev1alpha1.VMStopped || rt.WipedAt != nil {
		t.Fatalf("the instance's runtime %+v, want Stopped", rt)
	}
	if qr.r.Disks.Wiped("uid-ci-1") {
		t.Fatal("a live instance's disk was wiped")
	}
}

// removeOnce is a launcher whose next helper removal fails.
type removeOnce struct {
	helper.Launcher
	mu   sync.Mutex
	fail bool
}

func (l *removeOnce) Remove(ctx context.Context, uid string) error {
	l.mu.Lock()
	fail := l.fail
	l.fail = false
	l.mu.Unlock()
	if fail {
		return errors.New("the helper would not go")
	}
	return l.Launcher.Remove(ctx, uid)
}

// A deleted instance whose disk cannot be wiped yet (its helper would not
// go) still has its stop on record at once, with why the wipe waits; the
// next pass wipes it and records the wipe, the stop kept.
func TestADeletedInstancesStopIsRecordedWhenItsWipeFails(t *testing.T) {
	rg := newRig(t, "ci-1")
	rg.run("ci-1")
	l := &removeOnce{Launcher: rg.r.Launcher, fail: true}
	rg.r.Launcher = l
	if err := rg.c.Delete(context.Background(), rg.instance("ci-1")); err != nil {
		t.Fatal(err)
	}
	if err := rg.reconcile("ci-1"); err == nil {
		t.Fatal("a pass whose helper would not go succeeded")
	}
	rt := rg.instance("ci-1").Status.Runtime
	if rt.Phase != computev1alpha1.VMStopped || rt.LastStop == nil || rt.LastStop.Reason != computev1alpha1.StopReasonInstanceDeleted ||
		rt.WipedAt != nil || !strings.Contains(rt.Message, "the helper would not go") {
		t.Fatalf("runtime %+v, want Stopped with the deletion's stop, no wipe, and why", rt)
	}
	if rg.r.Disks.Wiped("uid-ci-1") {
		t.Fatal("wiped although the helper would not go")
	}

	mark := len(rg.recorded())
	if err := rg.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	if !rg.gone("ci-1") || !rg.r.Disks.Wiped("uid-ci-1") {
		t.Fatal("the instance was not wiped and let go on the next pass")
	}
	got := rg.statusWrites(mark)
	if len(got) != 1 || got[0].WipedAt == nil || got[0].LastStop == nil || got[0].Phase != computev1alpha1.VMStopped {
		t.Fatalf("writes %+v, want one with the wipe, the stop kept", got)
	}
}

// An agent that could record nothing after it removed the helper (every
// status write refused, as if it were killed) still knows how the VM went
// down on its next pass: the stop was kept in its state directory, since
// the helper that knew is gone.
func TestADeletedInstancesStopOutlivesItsHelperUntilOnRecord(t *testing.T) {
	rg := newRig(t, "ci-1")
	rg.run("ci-1")
	if err := rg.c.Delete(context.Background(), rg.instance("ci-1")); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused")
	rg.mu.Lock()
	rg.refuse = func(w write) error {
		if w.kind == "MacOSInstance" && w.subresource == "status" {
			return refused
		}
		return nil
	}
	rg.mu.Unlock()
	if err := rg.reconcile("ci-1"); !errors.Is(err, refused) {
		t.Fatalf("pass: %v, want the refusal", err)
	}
	if rt := rg.instance("ci-1").Status.Runtime; rt.LastStop != nil || rt.WipedAt != nil {
		t.Fatalf("runtime %+v, want nothing recorded", rt)
	}
	if running, err := rg.launcher.Running(); err != nil || running["uid-ci-1"] != "" {
		t.Fatalf("the helper is still there (%v): this pass proves nothing", err)
	}

	rg.mu.Lock()
	rg.refuse = nil
	rg.mu.Unlock()
	mark := len(rg.recorded())
	if err := rg.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	got := rg.statusWrites(mark)
	if len(got) != 1 || got[0].WipedAt == nil || got[0].LastStop == nil ||
		got[0].LastStop.Reason != computev1alpha1.StopReasonInstanceDeleted || got[0].LastStop.Method == "" {
		t.Fatalf("writes %+v, want one with the wipe and the stop the helper made", got)
	}
	if !rg.gone("ci-1") {
		t.Fatal("the instance was not let go")
	}
}

// A deleted instance that carries the audit exporter's finalizer keeps the
// agent's after the wipe (issue 39): the exporter takes both off in one
// write once the last records are out, and the agent writes no finalizer
// patch of its own, on this pass or the next. The wipe is on record first,
// as instance.wipe demands. The positive control is
// TestADeletedInstancesStopAndWipeAreOneStatusWrite: without the exporter's
// finalizer, the agent lets the instance go itself.
func TestAWipedInstanceKeepsTheAgentsFinalizerForTheExporter(t *testing.T) {
	rg := newRig(t, "ci-1")
	inst := rg.instance("ci-1")
	inst.Finalizers = []string{fleetv1alpha1.AuditFinalizer}
	if err := rg.c.Update(context.Background(), inst); err != nil {
		t.Fatal(err)
	}
	rg.run("ci-1")
	if err := rg.c.Delete(context.Background(), rg.instance("ci-1")); err != nil {
		t.Fatal(err)
	}
	mark := len(rg.recorded())
	for range 2 {
		if err := rg.reconcile("ci-1"); err != nil {
			t.Fatal(err)
		}
	}
	got := rg.instance("ci-1")
	if got.Status.Runtime == nil || got.Status.Runtime.WipedAt == nil || !rg.r.Disks.Wiped("uid-ci-1") {
		t.Fatalf("runtime %+v: the wipe is not done and on record", got.Status.Runtime)
	}
	if !slices.Equal(got.Finalizers, []string{fleetv1alpha1.AuditFinalizer, fleetv1alpha1.DiskWipeFinalizer}) {
		t.Fatalf("finalizers %v, want the exporter's and the agent's, for the exporter to take", got.Finalizers)
	}
	for _, w := range rg.recorded()[mark:] {
		if w.kind == "MacOSInstance" && w.subresource == "" {
			t.Errorf("the agent wrote the instance's finalizers after the wipe: %s", w.body)
		}
	}
}

// A tenant's own finalizer holds the exporter's back: the agent then takes
// its own off after the wipe, as without the exporter, so that the wipe's
// finalizer does not wait on the tenant.
func TestAWipedInstanceWithATenantsFinalizerLosesTheAgentsAtOnce(t *testing.T) {
	rg := newRig(t, "ci-1")
	inst := rg.instance("ci-1")
	inst.Finalizers = []string{fleetv1alpha1.AuditFinalizer, "example.com/keep"}
	if err := rg.c.Update(context.Background(), inst); err != nil {
		t.Fatal(err)
	}
	rg.run("ci-1")
	if err := rg.c.Delete(context.Background(), rg.instance("ci-1")); err != nil {
		t.Fatal(err)
	}
	if err := rg.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	if got := rg.instance("ci-1").Finalizers; !slices.Equal(got, []string{fleetv1alpha1.AuditFinalizer, "example.com/keep"}) {
		t.Fatalf("finalizers %v, want the agent's off, the exporter's and the tenant's left", got)
	}
}
