package bench

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	macadmission "github.com/boualleiguie/macrack-operator/internal/admission"
	"github.com/boualleiguie/macrack-operator/internal/inventory"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// countingStatus counts the status writes of the reservations.
type countingStatus struct {
	client.StatusClient
	writes atomic.Int64
}

func (c *countingStatus) Status() client.SubResourceWriter {
	c.writes.Add(1)
	return c.StatusClient.Status()
}

// BenchmarkInstanceAdmission: the validating handler on a tenant's new
// instance, side by side in one run: "cached" is the decision on the
// informer cache alone (before issue 35); "exact-dry-run" reads the lease,
// its class and its instances live and counts the reservations, writing
// nothing; "exact" also records the reservation on the lease, with its
// resourceVersion. Between iterations, untimed, the lease's reservations are
// cleared so that every create is admitted.
func BenchmarkInstanceAdmission(b *testing.B) {
	start(b)
	if _, err := harness.CreateClass(ctx, env.Client, "bench-cap", 2); client.IgnoreAlreadyExists(err) != nil {
		b.Fatal(err)
	}
	if err := env.CreateImage(ctx, env.Client, "bench-image", "60Gi"); err != nil {
		b.Fatal(err)
	}
	l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "cap", Namespace: "bench"},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "bench-cap", MinimumDuration: "24h"}}
	if err := env.Client.Create(ctx, l); client.IgnoreAlreadyExists(err) != nil {
		b.Fatal(err)
	}
	bound := l.DeepCopy()
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	bound.Status = leasingv1alpha1.MacNodeLeaseStatus{Phase: leasingv1alpha1.LeaseBound, NodeName: "c02bench",
		BoundAt: &now, EarliestReleaseAt: ptr.To(metav1.NewTime(now.Add(24 * time.Hour)))}
	if err := op.Client.Status().Patch(ctx, bound, client.MergeFrom(l)); err != nil {
		b.Fatal(err)
	}
	// The cache must hold the Bound lease for the cached decision to admit.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := &leasingv1alpha1.MacNodeLease{}
		if err := op.Client.Get(ctx, client.ObjectKeyFromObject(l), got); err == nil && got.Status.Phase == leasingv1alpha1.LeaseBound {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the cache never showed the lease Bound")
		}
	}
	writer := &countingStatus{StatusClient: op.Client}
	base := macadmission.PolicyValidator{Engine: op.Engine, Inventory: inventory.Builder{Reader: cacheOf(b)},
		Live: env.Client, Clock: clock.RealClock{}, Params: op.Params}
	exact := base
	exact.Reservations = &macadmission.Reservations{Live: env.Client, Writer: writer, TTL: leasingv1alpha1.ReservationTTL, Attempts: 32}

	request := func(i int, dryRun bool) admission.Request {
		obj := map[string]any{"apiVersion": "compute.macrack.io/v1alpha1", "kind": "MacOSInstance",
			"metadata": map[string]any{"name": fmt.Sprintf("i-%d", i), "namespace": "bench", "uid": fmt.Sprintf("u-%d", i)},
			"spec":     map[string]any{"leaseName": "cap", "imageName": "bench-image", "cpu": 4, "memory": "8Gi", "disk": "100Gi"}}
		raw, _ := json.Marshal(obj)
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: types.UID(fmt.Sprint("req-", i)), Operation: admissionv1.Create, DryRun: ptr.To(dryRun),
			Kind:     metav1.GroupVersionKind{Group: "compute.macrack.io", Version: "v1alpha1", Kind: "MacOSInstance"},
			Resource: metav1.GroupVersionResource{Group: "compute.macrack.io", Version: "v1alpha1", Resource: "macosinstances"},
			Name:     fmt.Sprintf("i-%d", i), Namespace: "bench", Object: runtime.RawExtension{Raw: raw},
			UserInfo: authenticationv1.UserInfo{Username: "tenant"},
		}}
	}
	clear := func(b *testing.B) {
		for {
			got := &leasingv1alpha1.MacNodeLease{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(l), got); err != nil {
				b.Fatal(err)
			}
			if len(got.Status.Reservations) == 0 {
				return
			}
			before := got.DeepCopy()
			got.Status.Reservations = nil
			if err := op.Client.Status().Patch(ctx, got, client.MergeFrom(before)); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name   string
		v      *macadmission.PolicyValidator
		dryRun bool
	}{{"cached", &base, false}, {"exact-dry-run", &exact, true}, {"exact", &exact, false}} {
		b.Run(c.name, func(b *testing.B) {
			clear(b)
			writes0 := writer.writes.Load()
			samples := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req := request(i, c.dryRun)
				t0 := time.Now()
				resp := c.v.Handle(ctx, req)
				samples = append(samples, time.Since(t0))
				if !resp.Allowed {
					b.Fatalf("%s: refused: %+v", c.name, resp.Result)
				}
				if c.name == "exact" {
					b.StopTimer()
					clear(b)
					b.StartTimer()
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(writer.writes.Load()-writes0)/float64(b.N), "writes/op")
			percentiles(b, samples)
		})
	}
}
