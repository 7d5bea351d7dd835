package audit

// Issue 17: one reconcile of the audit exporter takes the same time over a
// fleet of 10 and of 1,000 chassis (one lease and two instances each). Run
// it with `make bench-objects`, beside test/envtest/bench's
// BenchmarkObjects, which measures the other controllers over a real
// informer cache. The exporter reads only its one object, by key, so a fake
// client serves: its Get does not grow with the objects it holds (its List
// does, which is why the other controllers are measured over envtest).

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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

// nopSink acknowledges every record.
type nopSink struct{}

func (nopSink) Publish(context.Context, cloudevents.Event) error { return nil }
func (nopSink) Close() error                                     { return nil }

// benchFleet is n bound leases of two running instances each, every
// journal exported, and the lease "pending" of n/2's namespace with two
// records not exported yet.
func benchFleet(b *testing.B, n int, now time.Time) (client.WithWatch, []client.Object) {
	b.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{fleetv1alpha1.AddToScheme, leasingv1alpha1.AddToScheme, computev1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			b.Fatal(err)
		}
	}
	var objs []client.Object
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("t%d", i/10)
		l := &leasingv1alpha1.MacNodeLease{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("l-%d", i), Namespace: ns, UID: types.UID(fmt.Sprintf("l-%d", i)),
				Finalizers: []string{fleetv1alpha1.LeaseFinalizer, fleetv1alpha1.AuditFinalizer}},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
		}
		journal.Lease(&leasingv1alpha1.MacNodeLeaseStatus{}, l, now)
		before := l.Status.DeepCopy()
		l.Status.Phase, l.Status.BoundAt = leasingv1alpha1.LeaseBound, &metav1.Time{Time: now}
		l.Status.Serial, l.Status.NodeName = fmt.Sprintf("C02B%08d", i), fmt.Sprintf("c02b%08d", i)
		journal.Lease(before, l, now)
		l.Status.Audit.ExportedSequence = l.Status.Audit.Next() - 1
		objs = append(objs, l)
		for _, s := range []string{"a", "b"} {
			inst := &computev1alpha1.MacOSInstance{
				ObjectMeta: metav1.ObjectMeta{Name: l.Name + "-" + s, Namespace: ns, UID: types.UID(l.Name + "-" + s),
					Finalizers: []string{fleetv1alpha1.DiskWipeFinalizer, fleetv1alpha1.AuditFinalizer}},
				Spec:   computev1alpha1.MacOSInstanceSpec{LeaseName: l.Name, ImageName: "sequoia", CPU: 4},
				Status: computev1alpha1.MacOSInstanceStatus{NodeName: l.Status.NodeName, Runtime: &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMRunning}},
			}
			inst.Status.Runtime.StartedAt = &metav1.Time{Time: now}
			objs = append(objs, inst)
		}
	}
	pending := &leasingv1alpha1.MacNodeLease{
		ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: fmt.Sprintf("t%d", n/20), UID: "pending",
			Finalizers: []string{fleetv1alpha1.LeaseFinalizer, fleetv1alpha1.AuditFinalizer}},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
	}
	journal.Lease(&leasingv1alpha1.MacNodeLeaseStatus{}, pending, now)
	before := pending.Status.DeepCopy()
	pending.Status.Phase, pending.Status.BoundAt = leasingv1alpha1.LeaseBound, &metav1.Time{Time: now}
	journal.Lease(before, pending, now)
	objs = append(objs, pending)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&leasingv1alpha1.MacNodeLease{}, &computev1alpha1.MacOSInstance{}).Build()
	return c, objs
}

// processCPU is the CPU time this process has used, in ns: per operation,
// steadier than wall time on a shared machine.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// dropWrites encodes and counts every write, and sends none: every
// iteration sees the same objects.
func dropWrites(c client.WithWatch, n *atomic.Int64) client.Client {
	patch := func(obj client.Object, p client.Patch) error {
		n.Add(1)
		_, err := p.Data(obj)
		return err
	}
	encode := func(obj client.Object) error {
		n.Add(1)
		_, err := json.Marshal(obj)
		return err
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Update: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.UpdateOption) error {
			return encode(obj)
		},
		Patch: func(_ context.Context, _ client.WithWatch, obj client.Object, p client.Patch, _ ...client.PatchOption) error {
			return patch(obj, p)
		},
		SubResourceUpdate: func(_ context.Context, _ client.Client, _ string, obj client.Object, _ ...client.SubResourceUpdateOption) error {
			return encode(obj)
		},
		SubResourcePatch: func(_ context.Context, _ client.Client, _ string, obj client.Object, p client.Patch, _ ...client.SubResourcePatchOption) error {
			return patch(obj, p)
		},
	})
}

// BenchmarkExporterReconcile: BenchmarkExporterReconcile/<case>/fleet=<n>.
// A steady pass finds nothing to export; the export pass publishes a
// lease's two records, and leaves its cursor until the journal needs the
// room (issue 39).
func BenchmarkExporterReconcile(b *testing.B) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		kind   int // index in kinds()
		key    func(n int) types.NamespacedName
		writes int64
		// kept: one reconciler for every pass, which remembers what the
		// sink acknowledged (a derived kind has no cursor to read it from).
		kept bool
	}{
		{"lease/steady", 0, func(n int) types.NamespacedName {
			return types.NamespacedName{Namespace: fmt.Sprintf("t%d", n/20), Name: fmt.Sprintf("l-%d", n/2)}
		}, 0, false},
		{"instance/steady", 1, func(n int) types.NamespacedName {
			return types.NamespacedName{Namespace: fmt.Sprintf("t%d", n/20), Name: fmt.Sprintf("l-%d-a", n/2)}
		}, 0, true},
		{"lease/export", 0, func(n int) types.NamespacedName {
			return types.NamespacedName{Namespace: fmt.Sprintf("t%d", n/20), Name: "pending"}
		}, 0, false}, // the lease's cursor waits for the room (issue 39)
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for _, n := range []int{10, 1000} {
				fc, _ := benchFleet(b, n, now)
				var writes atomic.Int64
				clk := clocktesting.NewFakeClock(now)
				e := &Exporter{Client: dropWrites(fc, &writes), Clock: clk, Sink: nopSink{}, Origin: event.Origin{Cluster: "bench"}, Metrics: NewMetrics()}
				e.gate = newGate(clk)
				e.kinds = kinds()
				req := ctrl.Request{NamespacedName: c.key(n)}
				b.Run(fmt.Sprintf("fleet=%d", n), func(b *testing.B) {
					kept := &kindReconciler{e: e, k: e.kinds[c.kind]}
					if c.kept {
						if _, err := kept.Reconcile(context.Background(), req); err != nil {
							b.Fatal(err)
						}
					}
					run := func() {
						// A fresh reconciler for a journaled kind: it
						// remembers what it sent.
						r := kept
						if !c.kept {
							r = &kindReconciler{e: e, k: e.kinds[c.kind]}
						}
						if _, err := r.Reconcile(context.Background(), req); err != nil {
							b.Fatal(err)
						}
					}
					writes.Store(0)
					run()
					if w := writes.Load(); w != c.writes {
						b.Fatalf("%s wrote %d times, want %d", c.name, w, c.writes)
					}
					b.ReportAllocs()
					cpu0 := processCPU()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						run()
					}
					b.StopTimer()
					b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
				})
			}
		})
	}
}
