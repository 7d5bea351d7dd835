package audit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/event"
	"github.com/boualleiguie/macrack-operator/internal/audit/journal"
)

// sink records what it acknowledged, and refuses while down.
type sink struct {
	mu   sync.Mutex
	down bool
	ids  []string
}

func (s *sink) Publish(_ context.Context, ev cloudevents.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errors.New("connection refused")
	}
	s.ids = append(s.ids, ev.ID())
	return nil
}
func (s *sink) Close() error { return nil }

func leaseWithJournal(finalizers ...string) *leasingv1alpha1.MacNodeLease {
	l := &leasingv1alpha1.MacNodeLease{
		ObjectMeta: metav1.ObjectMeta{Name: "mini", Namespace: "t", UID: "l-1", Finalizers: finalizers},
		Spec:       leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
	}
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	journal.Lease(&leasingv1alpha1.MacNodeLeaseStatus{}, l, now)
	l.Status.Phase = leasingv1alpha1.LeaseBound
	l.Status.BoundAt = &metav1.Time{Time: now}
	journal.Lease(&leasingv1alpha1.MacNodeLeaseStatus{}, l, now)
	return l
}

func exporterFor(t *testing.T, s *sink, clk *clocktesting.FakeClock, objs ...client.Object) (*Exporter, *kindReconciler, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = leasingv1alpha1.AddToScheme(scheme)
	_ = fleetv1alpha1.AddToScheme(scheme)
	_ = computev1alpha1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(objs...).Build()
	e := &Exporter{Client: c, Clock: clk, Sink: s, Origin: event.Origin{Cluster: "test"}, Metrics: NewMetrics()}
	e.gate = newGate(clk)
	e.kinds = kinds()
	return e, &kindReconciler{e: e, k: e.kinds[0]}, c
}

func TestRecordsStayInTheObjectUntilTheSinkAcknowledges(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	s := &sink{down: true}
	l := leaseWithJournal()
	_, r, c := exporterFor(t, s, clk, l)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(l)}

	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := &leasingv1alpha1.MacNodeLease{}
	_ = c.Get(context.Background(), req.NamespacedName, got)
	if got.Status.Audit.ExportedSequence != 0 || len(got.Status.Audit.Unexported()) != 2 {
		t.Fatalf("with the sink down: exported %d, %d unexported; want 0 and 2 (created, bound)", got.Status.Audit.ExportedSequence, len(got.Status.Audit.Unexported()))
	}
	if got.Finalizers[0] != fleetv1alpha1.AuditFinalizer {
		t.Fatalf("finalizers %v, want the audit finalizer", got.Finalizers)
	}

	// The sink is back, but the gate holds until the backoff passes on the
	// injected clock.
	s.down = false
	_, _ = r.Reconcile(context.Background(), req)
	if len(s.ids) != 0 {
		t.Fatalf("published %v inside the backoff", s.ids)
	}
	clk.Step(minBackoff)
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	_ = c.Get(context.Background(), req.NamespacedName, got)
	want := []string{"lease/l-1/1", "lease/l-1/2"}
	if len(s.ids) != 2 || s.ids[0] != want[0] || s.ids[1] != want[1] {
		t.Fatalf("published %v, want %v", s.ids, want)
	}
	// A lease's cursor waits until its journal needs the room: its records
	// stay in it, and this exporter remembers that they are out.
	if got.Status.Audit.ExportedSequence != 0 || len(got.Status.Audit.Records) != 2 {
		t.Fatalf("exportedSequence %d, %d records; want the cursor unwritten and both records kept", got.Status.Audit.ExportedSequence, len(got.Status.Audit.Records))
	}
	if b := unacknowledged(got.Status.Audit, r.lastSent(got.UID)); b != 0 {
		t.Fatalf("backlog %d after the sink took both, want 0", b)
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil || len(s.ids) != 2 {
		t.Fatalf("a second pass published %v (%v), want nothing again", s.ids, err)
	}
}

// TestTheCursorIsWrittenWhenItIsDue: a lease's and a chassis' (issue 39)
// only once the journal holds cursorRoom records past the cursor, so that
// its writer prunes them.
func TestTheCursorIsWrittenWhenItIsDue(t *testing.T) {
	now := time.Date(2026, 6, 2, 12, 0, 0, 0, time.UTC)
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: "c02a", UID: "n-1"},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02A", NodeClassName: "m4"}}
	mn.Status.Phase = fleetv1alpha1.MacNodeReady
	journal.Chassis(&fleetv1alpha1.MacNodeStatus{}, mn, now)
	fullChassis := mn.DeepCopy()
	fullChassis.Name, fullChassis.UID = "c02b", "n-2"
	for int64(len(fullChassis.Status.Audit.Records)) < cursorRoom {
		journal.Append(&fullChassis.Status.Audit, fleetv1alpha1.AuditRecord{Type: "ready", Time: metav1.NewTime(now)})
	}
	full := leaseWithJournal(fleetv1alpha1.AuditFinalizer)
	full.Name, full.UID = "full", "l-2"
	for int64(len(full.Status.Audit.Records)) < cursorRoom {
		journal.Append(&full.Status.Audit, fleetv1alpha1.AuditRecord{Type: "held", Time: metav1.NewTime(now)})
	}
	short := leaseWithJournal(fleetv1alpha1.AuditFinalizer)
	for _, tc := range []struct {
		name string
		kind string
		obj  client.Object
		want int64
	}{
		{name: "a chassis with its room used: written", kind: fleetv1alpha1.AuditKindChassis, obj: fullChassis, want: cursorRoom},
		{name: "a chassis with room left: not written", kind: fleetv1alpha1.AuditKindChassis, obj: mn, want: 0},
		{name: "a lease with its room used: written", kind: fleetv1alpha1.AuditKindLease, obj: full, want: cursorRoom},
		{name: "a lease with room left: not written", kind: fleetv1alpha1.AuditKindLease, obj: short, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &sink{}
			e, _, c := exporterFor(t, s, clocktesting.NewFakeClock(now), tc.obj.DeepCopyObject().(client.Object))
			var r *kindReconciler
			for _, k := range e.kinds {
				if k.name == tc.kind {
					r = &kindReconciler{e: e, k: k}
				}
			}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tc.obj)}
			if _, err := r.Reconcile(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			got := tc.obj.DeepCopyObject().(client.Object)
			if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			if cur := (*r.k.journal(got)).ExportedSequence; cur != tc.want || len(s.ids) == 0 {
				t.Fatalf("published %d records, cursor %d; want them out and the cursor at %d", len(s.ids), cur, tc.want)
			}
		})
	}
}

func TestADeletedLeaseGoesOnlyOnceEveryOtherFinalizerIsOffAndItsRecordsAreOut(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 6, 3, 12, 0, 0, 0, time.UTC))
	s := &sink{}
	l := leaseWithJournal(fleetv1alpha1.LeaseFinalizer, fleetv1alpha1.AuditFinalizer)
	l.DeletionTimestamp = &metav1.Time{Time: clk.Now()}
	_, r, c := exporterFor(t, s, clk, l)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(l)}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := &leasingv1alpha1.MacNodeLease{}
	if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
		t.Fatalf("the lease went while the lease controller's finalizer was on: %v", err)
	}
	for _, id := range s.ids {
		if id == event.DeletedID("lease", "l-1") {
			t.Fatal("the deleted record went out while the lease controller could still journal")
		}
	}
	// The lease controller lets it go.
	got.Finalizers = []string{fleetv1alpha1.AuditFinalizer}
	if err := c.Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if last := s.ids[len(s.ids)-1]; last != event.DeletedID("lease", "l-1") {
		t.Fatalf("last record %s, want the deleted record", last)
	}
	if err := c.Get(context.Background(), req.NamespacedName, got); err == nil {
		t.Fatalf("the lease stays with finalizers %v after its last record", got.Finalizers)
	}
}

func TestTheBackoffDoublesToAMinuteOnTheInjectedClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	g := newGate(clk)
	var got []time.Duration
	for range 9 {
		got = append(got, g.fail())
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute, time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoffs %v, want %v", got, want)
		}
	}
	if g.open() {
		t.Fatal("open inside the backoff")
	}
	clk.Step(time.Minute)
	if !g.open() {
		t.Fatal("still closed once the backoff passed")
	}
	g.succeed()
	if d := g.fail(); d != time.Second {
		t.Fatalf("after a success the backoff restarts at %s, not 1s", d)
	}
}

// TestAnObjectNotJournaledYetIsLeftAlone: the exporter may see a lease
// before its controller wrote its first record.
func TestAnObjectNotJournaledYetIsLeftAlone(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	s := &sink{}
	l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: "t", UID: "l-2"},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"}}
	_, r, c := exporterFor(t, s, clk, l)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(l)}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := &leasingv1alpha1.MacNodeLease{}
	_ = c.Get(context.Background(), req.NamespacedName, got)
	if len(s.ids) != 0 || got.Status.Audit != nil || len(got.Finalizers) != 1 {
		t.Fatalf("published %v, journal %+v, finalizers %v; want nothing sent, no journal, the audit finalizer", s.ids, got.Status.Audit, got.Finalizers)
	}
}

// TestAReleasedLeaseGoesWithoutItsLastCursorWrite: the records of a lease
// deleted go to the sink with no cursor write (issue 17: that write would
// precede the finalizer's removal by moments), and the lease stays while
// the lease controller has not released it. Once it is Released, its
// finalizer and the audit one come off in one write, after the deleted
// record (issue 39: the lease controller leaves its own to this write). An
// exporter that restarts in between sends the records again before it lets
// go.
func TestAReleasedLeaseGoesWithoutItsLastCursorWrite(t *testing.T) {
	for _, restart := range []bool{false, true} {
		clk := clocktesting.NewFakeClock(time.Date(2026, 6, 3, 12, 0, 0, 0, time.UTC))
		s := &sink{}
		l := leaseWithJournal(fleetv1alpha1.LeaseFinalizer, fleetv1alpha1.AuditFinalizer)
		l.Status.Phase = leasingv1alpha1.LeaseHeld
		l.DeletionTimestamp = &metav1.Time{Time: clk.Now()}
		e, r, c := exporterFor(t, s, clk, l)
		var cursorWrites, finalizerWrites int
		e.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				cursorWrites++
				return cl.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
			Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
				finalizerWrites++
				return cl.Patch(ctx, obj, p, opts...)
			},
		})
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(l)}
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if len(s.ids) != 2 || cursorWrites != 0 {
			t.Fatalf("restart %v: published %v with %d cursor writes; want both records out and no cursor write", restart, s.ids, cursorWrites)
		}
		got := &leasingv1alpha1.MacNodeLease{}
		if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
			t.Fatalf("restart %v: the lease went while Held, the lease controller's finalizer on: %v", restart, err)
		}
		if finalizerWrites != 0 || len(got.Finalizers) != 2 {
			t.Fatalf("restart %v: %d finalizer writes, finalizers %v; want none while Held", restart, finalizerWrites, got.Finalizers)
		}
		if restart {
			r = &kindReconciler{e: e, k: e.kinds[0]}
		}
		// The lease controller's release: Released, its finalizer left on.
		got.Status.Phase = leasingv1alpha1.LeaseReleased
		if err := c.Status().Update(context.Background(), got); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		want := []string{"lease/l-1/1", "lease/l-1/2", event.DeletedID("lease", "l-1")}
		if restart {
			want = []string{"lease/l-1/1", "lease/l-1/2", "lease/l-1/1", "lease/l-1/2", event.DeletedID("lease", "l-1")}
		}
		if !slices.Equal(s.ids, want) || cursorWrites != 0 {
			t.Fatalf("restart %v: published %v with %d cursor writes; want %v and none", restart, s.ids, cursorWrites, want)
		}
		if err := c.Get(context.Background(), req.NamespacedName, got); err == nil {
			t.Fatalf("restart %v: the lease stays with finalizers %v after its last record", restart, got.Finalizers)
		}
		if finalizerWrites != 1 {
			t.Fatalf("restart %v: %d finalizer writes; want both finalizers off in one", restart, finalizerWrites)
		}
	}
}

// A MacNode and a MacOSImage carry the audit finalizer as leases and
// instances do: deleting one waits, with the sink down, until its records
// are out, then the deleted record goes last and the object with it.
func TestADeletedChassisOrImageGoesOnlyOnceItsRecordsAreOut(t *testing.T) {
	now := time.Date(2026, 6, 3, 12, 0, 0, 0, time.UTC)
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: "c02a", UID: "n-1"},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02A", NodeClassName: "m4"}}
	mn.Status.Phase = fleetv1alpha1.MacNodeReady
	journal.Chassis(&fleetv1alpha1.MacNodeStatus{}, mn, now)
	img := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: "sequoia", UID: "i-1"},
		Spec: fleetv1alpha1.MacOSImageSpec{Source: "r.example/s@sha256:00"}}
	img.Status.Resolved = &fleetv1alpha1.ResolvedImage{Digest: "sha256:00", MacOSVersion: "15.5"}
	journal.Image(&fleetv1alpha1.MacOSImageStatus{}, img, now)

	for _, tc := range []struct {
		kind string
		obj  client.Object
	}{{fleetv1alpha1.AuditKindChassis, mn}, {fleetv1alpha1.AuditKindImage, img}} {
		t.Run(tc.kind, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(now)
			s := &sink{down: true}
			e, _, c := exporterFor(t, s, clk, tc.obj.DeepCopyObject().(client.Object))
			var r *kindReconciler
			for _, k := range e.kinds {
				if k.name == tc.kind {
					r = &kindReconciler{e: e, k: k}
				}
			}
			ctx := context.Background()
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tc.obj)}
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
			got := tc.obj.DeepCopyObject().(client.Object)
			if err := c.Get(ctx, req.NamespacedName, got); err != nil || !slices.Contains(got.GetFinalizers(), fleetv1alpha1.AuditFinalizer) {
				t.Fatalf("finalizers %v (%v), want the audit finalizer", got.GetFinalizers(), err)
			}
			// An administrator deletes it while the sink is down: it stays.
			if err := c.Delete(ctx, got); err != nil {
				t.Fatal(err)
			}
			clk.Step(minBackoff)
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatalf("the %s went with its records unexported: %v", tc.kind, err)
			}
			// The sink is back: the records, then the deleted record, then
			// the object goes.
			s.down = false
			clk.Step(time.Minute)
			for range 3 {
				if _, err := r.Reconcile(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			if len(s.ids) < 2 || s.ids[0] != tc.kind+"/"+string(tc.obj.GetUID())+"/1" || s.ids[len(s.ids)-1] != event.DeletedID(tc.kind, string(tc.obj.GetUID())) {
				t.Fatalf("published %v, want its records then its deleted record", s.ids)
			}
			if err := c.Get(ctx, req.NamespacedName, got); err == nil {
				t.Fatalf("the %s stays with finalizers %v after its last record", tc.kind, got.GetFinalizers())
			}
		})
	}
}
