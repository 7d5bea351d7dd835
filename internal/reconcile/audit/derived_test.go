package audit

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/event"
	"github.com/boualleiguie/macrack-operator/internal/audit/journal"
)

func reconcilerOf(e *Exporter, kind string) *kindReconciler {
	for _, k := range e.kinds {
		if k.name == kind {
			return &kindReconciler{e: e, k: k}
		}
	}
	return nil
}

// An instance's records are derived from its status (issue 39): the
// exporter writes nothing to it, a record whose fact its owner overwrote
// during an outage still goes out, a restart sends again only ids already
// sent (which JetStream stores once), and the instance goes only once every
// record its final status derives, then deleted, is out.
func TestAnInstancesDerivedRecordsGoOutThroughAnOutageARestartAndItsDeletion(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 6, 5, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	mt := func(d time.Duration) *metav1.Time { t := metav1.NewTime(t0.Add(d)); return &t }
	inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "t", UID: "i-1",
		CreationTimestamp: *mt(0), Finalizers: []string{fleetv1alpha1.AuditFinalizer, fleetv1alpha1.DiskWipeFinalizer}},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "mini", ImageName: "sequoia"}}
	inst.Status.NodeName = "c02a"
	inst.Status.Conditions = []metav1.Condition{{Type: computev1alpha1.ConditionPlaced, Status: metav1.ConditionTrue, Reason: computev1alpha1.ReasonPlaced, LastTransitionTime: *mt(time.Second)}}
	inst.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMRunning, StartedAt: mt(time.Minute)}
	s := &sink{down: true}
	e, _, c := exporterFor(t, s, clk, inst)
	var exporterWrites int
	e.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
			exporterWrites++
			return nil
		},
	})
	r := reconcilerOf(e, fleetv1alpha1.AuditKindInstance)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(inst)}
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	// The agent's writes, as they would land.
	agent := func(change func(*computev1alpha1.RuntimeStatus)) {
		t.Helper()
		got := &computev1alpha1.MacOSInstance{}
		if err := c.Get(ctx, req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		change(got.Status.Runtime)
		if err := c.Status().Update(ctx, got); err != nil {
			t.Fatal(err)
		}
	}
	id := func(typ string, d time.Duration) string { return event.FactID("instance", "i-1", typ, t0.Add(d)) }

	reconcile() // the sink is down: nothing goes, the first run is remembered
	if len(s.ids) != 0 {
		t.Fatalf("published %v with the sink down", s.ids)
	}
	if n, _ := r.waiting(inst); n != 3 {
		t.Fatalf("%d records waiting, want created, placed, running", n)
	}
	// Quarantined, stopped, and running again, all within the outage: the
	// first run's start is no longer in status.
	agent(func(rt *computev1alpha1.RuntimeStatus) {
		rt.Phase, rt.LastStop = computev1alpha1.VMStopped, &computev1alpha1.VMStop{Method: computev1alpha1.StopGuestShutdown, Reason: "ChassisQuarantined", At: *mt(10 * time.Minute)}
	})
	agent(func(rt *computev1alpha1.RuntimeStatus) {
		rt.Phase, rt.StartedAt = computev1alpha1.VMRunning, mt(20*time.Minute)
	})
	s.down = false
	clk.Step(time.Minute)
	reconcile()
	want := []string{id("created", 0), id("placed", time.Second), id("running", time.Minute), id("stopped", 10*time.Minute), id("running", 20*time.Minute)}
	if !slices.Equal(s.ids, want) {
		t.Fatalf("published\n%v\nwant\n%v", s.ids, want)
	}
	reconcile()
	if len(s.ids) != len(want) {
		t.Fatalf("a second pass published %v again", s.ids[len(want):])
	}

	// A restart, or a new leader, derives again what status holds: the same
	// ids, which the stream stores once.
	r = reconcilerOf(e, fleetv1alpha1.AuditKindInstance)
	reconcile()
	for _, again := range s.ids[len(want):] {
		if !slices.Contains(want, again) {
			t.Fatalf("after a restart, a new id %s", again)
		}
	}
	sent := len(s.ids)

	// Deleted: the agent stops the VM and wipes its disk, then lets go,
	// while the sink is down.
	s.down = true
	clk.Step(time.Hour)
	if err := c.Delete(ctx, inst.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	agent(func(rt *computev1alpha1.RuntimeStatus) {
		rt.Phase, rt.LastStop = computev1alpha1.VMStopped, &computev1alpha1.VMStop{Method: computev1alpha1.StopRequestStop, Reason: computev1alpha1.StopReasonInstanceDeleted, At: *mt(30 * time.Minute)}
		rt.Wipe = &fleetv1alpha1.WipeEvidence{Method: "unlink", Bytes: 1, WipedAt: *mt(31 * time.Minute)}
	})
	reconcile()
	if slices.Contains(s.ids, event.DeletedID("instance", "i-1")) {
		t.Fatal("the deleted record went out while the agent could still write")
	}
	got := &computev1alpha1.MacOSInstance{}
	_ = c.Get(ctx, req.NamespacedName, got)
	got.Finalizers = []string{fleetv1alpha1.AuditFinalizer}
	if err := c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Hour)
	reconcile()
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatalf("the instance went with the sink down: %v", err)
	}
	s.down = false
	clk.Step(time.Hour)
	reconcile()
	if tail := s.ids[sent:]; !slices.Equal(tail, []string{id("stopped", 30*time.Minute), id("wiped", 31*time.Minute), event.DeletedID("instance", "i-1")}) {
		t.Fatalf("published %v at the end, want stopped, wiped, deleted", tail)
	}
	if err := c.Get(ctx, req.NamespacedName, got); err == nil {
		t.Fatalf("the instance stays with finalizers %v after its last record", got.Finalizers)
	}
	if exporterWrites != 0 {
		t.Fatalf("the exporter wrote the instance's status %d times, want never", exporterWrites)
	}
}

// A deleted instance whose wipe is on record loses the agent's finalizer
// and the exporter's in one write, after its deleted record (issue 39): the
// agent, which wrote the wipe, leaves its own to that write. The positive
// control: stopped, its wipe not on record, it keeps both.
func TestTheExporterTakesTheAgentsFinalizerOnceTheWipeIsOnRecord(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 6, 5, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	mt := func(d time.Duration) *metav1.Time { t := metav1.NewTime(t0.Add(d)); return &t }
	inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "t", UID: "i-1",
		CreationTimestamp: *mt(0), DeletionTimestamp: mt(time.Hour),
		Finalizers: []string{fleetv1alpha1.AuditFinalizer, fleetv1alpha1.DiskWipeFinalizer}},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "mini", ImageName: "sequoia"}}
	inst.Status.NodeName = "c02a"
	inst.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMStopped, StartedAt: mt(time.Minute),
		LastStop: &computev1alpha1.VMStop{Method: computev1alpha1.StopRequestStop, Reason: computev1alpha1.StopReasonInstanceDeleted, At: *mt(time.Hour)}}
	s := &sink{}
	e, _, c := exporterFor(t, s, clk, inst)
	var finalizerWrites int
	e.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			finalizerWrites++
			return cl.Patch(ctx, obj, p, opts...)
		},
	})
	r := reconcilerOf(e, fleetv1alpha1.AuditKindInstance)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(inst)}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	got := &computev1alpha1.MacOSInstance{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatalf("the instance went before its wipe was on record: %v", err)
	}
	if finalizerWrites != 0 || slices.Contains(s.ids, event.DeletedID("instance", "i-1")) {
		t.Fatalf("%d finalizer writes, published %v; want none and no deleted record before the wipe", finalizerWrites, s.ids)
	}

	// The agent's one write: the wipe's evidence, its finalizer left on.
	got.Status.Runtime.WipedAt = mt(time.Hour + time.Second)
	got.Status.Runtime.Wipe = &fleetv1alpha1.WipeEvidence{Method: "unlink", Bytes: 1, WipedAt: *mt(time.Hour + time.Second)}
	if err := c.Status().Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, req.NamespacedName, got); err == nil {
		t.Fatalf("the instance stays with finalizers %v after its wipe and last record", got.Finalizers)
	}
	if finalizerWrites != 1 || s.ids[len(s.ids)-1] != event.DeletedID("instance", "i-1") {
		t.Fatalf("%d finalizer writes, published %v; want one write after the deleted record", finalizerWrites, s.ids)
	}
}

// A chassis' cursor is written lazily (issue 39), once 32 records are past
// it, and its journal's writer prunes what is before it: forty transitions
// with the exporter running lose none. The positive control: with the
// sink down throughout, the journal's bound drops the oldest, and counts
// them.
func TestAChassisWithALazyCursorDropsNoRecord(t *testing.T) {
	for _, down := range []bool{false, true} {
		ctx := context.Background()
		now := time.Date(2026, 6, 6, 12, 0, 0, 0, time.UTC)
		clk := clocktesting.NewFakeClock(now)
		mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: "c02a", UID: "n-1", Finalizers: []string{fleetv1alpha1.AuditFinalizer}},
			Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02A", NodeClassName: "m4"}}
		mn.Status.Phase = fleetv1alpha1.MacNodeReady
		journal.Chassis(&fleetv1alpha1.MacNodeStatus{}, mn, now)
		s := &sink{down: down}
		e, _, c := exporterFor(t, s, clk, mn)
		var cursorWrites int
		e.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				cursorWrites++
				return cl.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		})
		r := reconcilerOf(e, fleetv1alpha1.AuditKindChassis)
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(mn)}
		dropped, transitions := 0, 40
		if down {
			transitions = 80
		}
		for i := range transitions {
			// The node controller's write: the phase flips, journaled.
			got := &fleetv1alpha1.MacNode{}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			before := got.Status.DeepCopy()
			got.Status.Phase = []fleetv1alpha1.MacNodePhase{fleetv1alpha1.MacNodeLeased, fleetv1alpha1.MacNodeReady}[i%2]
			dropped += journal.Chassis(before, got, clk.Now())
			if n := len(got.Status.Audit.Records); n > fleetv1alpha1.MaxAuditRecords {
				t.Fatalf("the journal holds %d records", n)
			}
			if err := c.Status().Update(ctx, got); err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Second)
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		if down {
			if dropped == 0 {
				t.Fatal("with the sink down, 80 transitions dropped none: the bound is not what this test thinks")
			}
			continue
		}
		if dropped != 0 {
			t.Fatalf("%d records dropped with the exporter running", dropped)
		}
		var want []string
		final := &fleetv1alpha1.MacNode{}
		_ = c.Get(ctx, req.NamespacedName, final)
		for seq := int64(1); seq < final.Status.Audit.NextSequence; seq++ {
			want = append(want, event.ID("chassis", "n-1", seq))
		}
		if len(want) < transitions || !slices.Equal(s.ids, want) {
			t.Fatalf("published %v, want every record once, in order", s.ids)
		}
		if cursorWrites == 0 || cursorWrites > 2 {
			t.Fatalf("%d cursor writes for %d records, want one per %d", cursorWrites, len(want), cursorRoom)
		}
	}
}
