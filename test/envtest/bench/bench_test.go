// Package bench measures the admission path against a real API server:
// the handler alone over informer caches of growing size, and the round trip
// of a lease create through the API server and the TLS webhook. Run it with
// `make bench`; it is not part of `make test`.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	macadmission "github.com/boualleiguie/macrack-operator/internal/admission"
	"github.com/boualleiguie/macrack-operator/internal/inventory"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var (
	setup    sync.Once
	env      *harness.Env
	op       *harness.Operator
	setupErr error
	// fleet is how many MacNodes and leases exist so far.
	fleet int
	ctx   = context.Background()
)

func start(b *testing.B) {
	b.Helper()
	setup.Do(func() {
		if env, setupErr = harness.Start(harness.WithWebhooks); setupErr != nil {
			return
		}
		// The webhooks alone: the benchmarks measure admission, not the
		// controllers' reactions to thousands of new objects.
		op, setupErr = env.StartOperator(harness.OperatorOptions{Start: time.Now(), Webhooks: true, WebhooksOnly: true})
		if setupErr == nil {
			setupErr = env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}})
		}
	})
	if setupErr != nil {
		b.Fatal(setupErr)
	}
}

// grow brings the fleet to n MacNodes and n bound-looking leases (each lease
// records its serial, so that the lease-by-serial index has n entries).
func grow(b *testing.B, n int) {
	b.Helper()
	c := env.Client
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	errs := make(chan error, n)
	for i := fleet; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			serial := fmt.Sprintf("C02B%08d", i)
			mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: strings.ToLower(serial)},
				Spec: fleetv1alpha1.MacNodeSpec{Serial: serial, NodeClassName: "bench"}}
			if err := c.Create(ctx, mn); err != nil {
				errs <- err
				return
			}
			l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("l-%d", i), Namespace: "bench"},
				Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "bench-none", MinimumDuration: "24h"}}
			if err := c.Create(ctx, l); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	fleet = max(fleet, n)
	// Wait for the operator's cache to hold them all.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list := &fleetv1alpha1.MacNodeList{}
		if err := op.Client.List(ctx, list); err != nil {
			b.Fatal(err)
		}
		if len(list.Items) >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("cache holds %d MacNodes, want %d", len(list.Items), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func percentiles(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	at := func(q float64) float64 { return float64(samples[int(q*float64(len(samples)-1))].Microseconds()) }
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// BenchmarkAdmissionHandler: index lookup, input build and Decide, with the
// operator's informer caches holding 10, 1,000 and 10,000 MacNodes and
// leases. The request is a lease claiming a serial: it reads the MacNode of
// the serial and the leases of the serial through the indexes.
func BenchmarkAdmissionHandler(b *testing.B) {
	start(b)
	for _, n := range []int{10, 1000, 10000} {
		grow(b, n)
		v := &macadmission.PolicyValidator{
			Engine: op.Engine, Inventory: inventory.Builder{Reader: cacheOf(b)},
			Clock: clock.RealClock{}, Params: op.Params,
		}
		serial := fmt.Sprintf("C02B%08d", n/2)
		old := map[string]any{"apiVersion": "leasing.macrack.io/v1alpha1", "kind": "MacNodeLease",
			"metadata": map[string]any{"name": "claimer", "namespace": "bench", "uid": "u-claimer"},
			"spec":     map[string]any{"nodeClassName": "bench", "minimumDuration": "24h"},
			"status":   map[string]any{"phase": "Pending"}}
		obj := map[string]any{"apiVersion": "leasing.macrack.io/v1alpha1", "kind": "MacNodeLease",
			"metadata": map[string]any{"name": "claimer", "namespace": "bench", "uid": "u-claimer"},
			"spec":     map[string]any{"nodeClassName": "bench", "minimumDuration": "24h"},
			"status": map[string]any{"phase": "Bound", "serial": serial, "nodeName": strings.ToLower(serial),
				"boundAt": "2026-06-01T12:00:00Z", "earliestReleaseAt": "2026-06-02T12:00:00Z"}}
		rawObj, _ := json.Marshal(obj)
		rawOld, _ := json.Marshal(old)
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: types.UID("bench"), Operation: admissionv1.Update, SubResource: "status",
			Kind:     metav1.GroupVersionKind{Group: "leasing.macrack.io", Version: "v1alpha1", Kind: "MacNodeLease"},
			Resource: metav1.GroupVersionResource{Group: "leasing.macrack.io", Version: "v1alpha1", Resource: "macnodeleases"},
			Name:     "claimer", Namespace: "bench",
			Object: runtime.RawExtension{Raw: rawObj}, OldObject: runtime.RawExtension{Raw: rawOld},
			UserInfo: authenticationv1.UserInfo{Username: harness.OperatorUser},
		}}
		b.Run(fmt.Sprintf("fleet=%d", n), func(b *testing.B) {
			samples := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				resp := v.Handle(ctx, req)
				samples = append(samples, time.Since(t0))
				// The MacNode's binding does not name this lease, so
				// tenancy.serial refuses: the decision read the index.
				if resp.Allowed || !strings.Contains(resp.Result.Message, "tenancy.serial") {
					b.Fatalf("unexpected answer: %+v", resp.Result)
				}
			}
			b.StopTimer()
			percentiles(b, samples)
		})
	}
}

func cacheOf(b *testing.B) client.Reader {
	b.Helper()
	return op.Client // the manager's client reads from its informer cache
}

// BenchmarkLeaseCreateRoundTrip: a tenant's lease create through the API
// server: authentication, the mutating and the validating webhook over TLS,
// schema validation, etcd. The fleet holds 1,000 MacNodes.
func BenchmarkLeaseCreateRoundTrip(b *testing.B) {
	start(b)
	grow(b, 1000)
	n := max(b.N, 1000)
	samples := make([]time.Duration, 0, n)
	b.ResetTimer()
	for i := 0; i < n; i++ {
		l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{GenerateName: "rt-", Namespace: "bench"},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "bench-none", MinimumDuration: "24h"}}
		t0 := time.Now()
		if err := env.Client.Create(ctx, l); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "requests")
	percentiles(b, samples)
}

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	code := m.Run()
	if op != nil {
		_ = op.Stop()
	}
	if env != nil {
		_ = env.Stop()
	}
	objStopAll() // objects_test.go's control plane
	os.Exit(code)
}

// BenchmarkConfigMapCreateRoundTrip is the floor under the lease figure: a
// create that no webhook sees, through the same API server and etcd.
func BenchmarkConfigMapCreateRoundTrip(b *testing.B) {
	start(b)
	n := max(b.N, 1000)
	samples := make([]time.Duration, 0, n)
	b.ResetTimer()
	for i := 0; i < n; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "rt-", Namespace: "bench"}, Data: map[string]string{"k": "v"}}
		t0 := time.Now()
		if err := env.Client.Create(ctx, cm); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "requests")
	percentiles(b, samples)
}
