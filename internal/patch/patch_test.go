package patch

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

func TestPatchWritesStatusFirstAndOnlyWhatChanged(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = leasingv1alpha1.AddToScheme(scheme)
	lease := &leasingv1alpha1.MacNodeLease{
		ObjectMeta: metav1.ObjectMeta{Name: "l1", Namespace: "t", Finalizers: []string{fleetv1alpha1.LeaseFinalizer}},
		Spec:       leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
	}
	var calls []string
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(lease).WithStatusSubresource(lease).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
				calls = append(calls, "main")
				return cl.Patch(ctx, obj, p, opts...)
			},
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				calls = append(calls, sub)
				return cl.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		}).Build()

	got := &leasingv1alpha1.MacNodeLease{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(lease), got); err != nil {
		t.Fatal(err)
	}
	h := NewHelper(got, c)
	if err := h.Patch(context.Background(), got); err != nil || len(calls) != 0 {
		t.Fatalf("nothing changed, so nothing is written: calls %v, err %v", calls, err)
	}

	got.Status.Phase = leasingv1alpha1.LeaseReleased
	got.Finalizers = nil
	if err := h.Patch(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[0] != "status" || calls[1] != "main" {
		t.Fatalf("want the status patched before the finalizer removal, got %v", calls)
	}
	stored := &leasingv1alpha1.MacNodeLease{}
	err := c.Get(context.Background(), client.ObjectKeyFromObject(lease), stored)
	if err == nil && stored.Status.Phase != leasingv1alpha1.LeaseReleased {
		t.Fatalf("status lost: %+v", stored.Status)
	}
	if err == nil && len(stored.Finalizers) != 0 {
		t.Fatalf("the finalizer removal was lost behind the status patch: %v", stored.Finalizers)
	}
}

// TestARefusedStatusPatchKeepsTheFinalizer: a pass whose status write was
// refused removes no finalizer, so that the object never goes without the
// record its status carried; the positive control, the status accepted,
// writes both.
func TestARefusedStatusPatchKeepsTheFinalizer(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = leasingv1alpha1.AddToScheme(scheme)
	lease := &leasingv1alpha1.MacNodeLease{
		ObjectMeta: metav1.ObjectMeta{Name: "l1", Namespace: "t", Finalizers: []string{fleetv1alpha1.LeaseFinalizer, "example.com/keep"}},
		Spec:       leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "nope", MinimumDuration: "24h"},
	}
	refused := apierrors.NewInvalid(leasingv1alpha1.GroupVersion.WithKind("MacNodeLease").GroupKind(), "l1", nil)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(lease).WithStatusSubresource(lease).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
				return refused
			},
		}).Build()
	got := &leasingv1alpha1.MacNodeLease{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(lease), got); err != nil {
		t.Fatal(err)
	}
	h := NewHelper(got, c)
	got.Status.Phase = leasingv1alpha1.LeaseReleased
	got.Finalizers = []string{"example.com/keep"}
	err := h.Patch(context.Background(), got)
	if !errors.Is(err, refused) {
		t.Fatalf("want the status error reported, got %v", err)
	}
	stored := &leasingv1alpha1.MacNodeLease{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(lease), stored); err != nil {
		t.Fatal(err)
	}
	if len(stored.Finalizers) != 2 || stored.Finalizers[0] != fleetv1alpha1.LeaseFinalizer {
		t.Fatalf("the finalizer went without the record its status carried: %v", stored.Finalizers)
	}
	if stored.Status.Phase != "" {
		t.Fatalf("a refused status was written: %+v", stored.Status)
	}

	// Positive control: with the status accepted, both go.
	c2 := fake.NewClientBuilder().WithScheme(scheme).WithObjects(lease.DeepCopy()).WithStatusSubresource(lease).Build()
	got2 := &leasingv1alpha1.MacNodeLease{}
	if err := c2.Get(context.Background(), client.ObjectKeyFromObject(lease), got2); err != nil {
		t.Fatal(err)
	}
	h2 := NewHelper(got2, c2)
	got2.Status.Phase = leasingv1alpha1.LeaseReleased
	got2.Finalizers = []string{"example.com/keep"}
	if err := h2.Patch(context.Background(), got2); err != nil {
		t.Fatal(err)
	}
	if err := c2.Get(context.Background(), client.ObjectKeyFromObject(lease), got2); err != nil || got2.Status.Phase != leasingv1alpha1.LeaseReleased || len(got2.Finalizers) != 1 {
		t.Fatalf("positive control: %+v %v", got2, err)
	}
}

func TestRefusalNamesTheRule(t *testing.T) {
	gk := leasingv1alpha1.GroupVersion.WithKind("MacNodeLease").GroupKind()
	for _, c := range []struct {
		name    string
		err     error
		rule    string
		refused bool
	}{
		{"a ValidatingAdmissionPolicy's denial names its rule",
			apierrors.NewInvalid(gk, "l", field.ErrorList{field.Invalid(field.NewPath(""), nil,
				"ValidatingAdmissionPolicy 'macrack-lease-floor' with binding 'macrack-lease-floor' denied request: lease.floor: status.earliestReleaseAt 2026-06-02T01:00:00Z is less than minimumDuration 25h0.5s after boundAt 2026-06-01T00:00:00Z")}),
			"lease.floor", true},
		{"a webhook's denial names its rule",
			apierrors.NewForbidden(schema.GroupResource{Group: "leasing.macrack.io", Resource: "macnodeleases"}, "l",
				errors.New(`admission webhook "vmacnodelease.macrack.io" denied the request: audit.finalizer: the record is not out`)),
			"audit.finalizer", true},
		{"a refusal naming no rule is still a refusal", apierrors.NewBadRequest("nope"), "unknown", true},
		{"a conflict is no refusal", apierrors.NewConflict(schema.GroupResource{}, "l", errors.New("stale")), "", false},
		{"a missing object is no refusal", apierrors.NewNotFound(schema.GroupResource{}, "l"), "", false},
		{"a network error is no refusal", errors.New("connection refused"), "", false},
	} {
		rule, refused := Refusal(fmt.Errorf("patching status: %w", c.err))
		if rule != c.rule || refused != c.refused {
			t.Errorf("%s: got (%q, %v), want (%q, %v)", c.name, rule, refused, c.rule, c.refused)
		}
	}
}

// TestALockedStatusPatchOnAStaleReadWritesNothing: a pass that numbers audit
// records read a lease another pass has written since. Its status patch
// conflicts, and its finalizer removal waits too, for the retry from a
// fresh read; the positive control, the same pass on a fresh read, writes
// both.
func TestALockedStatusPatchOnAStaleReadWritesNothing(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = leasingv1alpha1.AddToScheme(scheme)
	lease := &leasingv1alpha1.MacNodeLease{
		ObjectMeta: metav1.ObjectMeta{Name: "l1", Namespace: "t", Finalizers: []string{fleetv1alpha1.LeaseFinalizer}},
		Spec:       leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(lease).WithStatusSubresource(lease).Build()
	ctx := context.Background()
	read := func() *leasingv1alpha1.MacNodeLease {
		got := &leasingv1alpha1.MacNodeLease{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(lease), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	stale := read()
	other := read()
	other.Status.Phase = leasingv1alpha1.LeaseBound
	if err := c.Status().Update(ctx, other); err != nil {
		t.Fatal(err)
	}

	h := NewHelper(stale, c)
	stale.Status.Phase = leasingv1alpha1.LeaseReleased
	stale.Finalizers = nil
	h.LockStatus()
	if err := h.Patch(ctx, stale); !apierrors.IsConflict(errors.Unwrap(err)) {
		t.Fatalf("a locked patch on a stale read: %v, want a conflict", err)
	}
	if got := read(); got.Status.Phase != leasingv1alpha1.LeaseBound || len(got.Finalizers) != 1 {
		t.Fatalf("after the conflict: phase %s, finalizers %v; want Bound and the finalizer kept", got.Status.Phase, got.Finalizers)
	}

	fresh := read()
	h = NewHelper(fresh, c)
	fresh.Status.Phase = leasingv1alpha1.LeaseReleased
	fresh.Finalizers = nil
	h.LockStatus()
	if err := h.Patch(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if got := read(); got.Status.Phase != leasingv1alpha1.LeaseReleased || len(got.Finalizers) != 0 {
		t.Fatalf("on a fresh read: phase %s, finalizers %v; want Released and none", got.Status.Phase, got.Finalizers)
	}
}
