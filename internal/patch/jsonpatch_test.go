package patch

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

func TestSetOpsWriteWhatAMergePatchWould(t *testing.T) {
	for _, c := range []struct {
		name     string
		was, now map[string]any
		want     string
	}{
		{name: "an unchanged status makes no operation",
			was: map[string]any{"phase": "Bound"}, now: map[string]any{"phase": "Bound"}, want: `[]`},
		{name: "a changed scalar and a new member are set, a member gone is removed",
			was:  map[string]any{"phase": "Bound", "heldAt": "t0"},
			now:  map[string]any{"phase": "Released", "releasedAt": "t1"},
			want: `[{"op":"remove","path":"/status/heldAt"},{"op":"add","path":"/status/phase","value":"Released"},{"op":"add","path":"/status/releasedAt","value":"t1"}]`},
		{name: "an object in both is descended into: its members nobody changed, another writer's among them, are not sent",
			was:  map[string]any{"audit": map[string]any{"nextSequence": int64(3), "exportedSequence": int64(2)}},
			now:  map[string]any{"audit": map[string]any{"nextSequence": int64(5), "exportedSequence": int64(2)}},
			want: `[{"op":"add","path":"/status/audit/nextSequence","value":5}]`},
		{name: "a list is set whole, as a merge patch sets it",
			was:  map[string]any{"conditions": []any{map[string]any{"type": "Bound"}}},
			now:  map[string]any{"conditions": []any{map[string]any{"type": "Bound"}, map[string]any{"type": "Held"}}},
			want: `[{"op":"add","path":"/status/conditions","value":[{"type":"Bound"},{"type":"Held"}]}]`},
		{name: "a key is escaped as one pointer token",
			was: map[string]any{}, now: map[string]any{"a/b~c": "x"},
			want: `[{"op":"add","path":"/status/a~1b~0c","value":"x"}]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := json.Marshal(appendSetOps([]any{}, "/status", c.was, c.now))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// TestAStatusLockedOnItsSequenceLosesOnlyToThatSequence: the lease
// controller's journal write, on a read that another writer (the
// reservations) has moved since, goes through and keeps that writer's
// field; on a read whose journal moved since, it is a Conflict, and the
// pass's finalizer removal waits with it; on a status that was empty when
// read, the resourceVersion is the lock.
func TestAStatusLockedOnItsSequenceLosesOnlyToThatSequence(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = leasingv1alpha1.AddToScheme(scheme)
	ctx := context.Background()
	setup := func(t *testing.T, status leasingv1alpha1.MacNodeLeaseStatus) (client.Client, func() *leasingv1alpha1.MacNodeLease, *[]client.Patch) {
		lease := &leasingv1alpha1.MacNodeLease{
			ObjectMeta: metav1.ObjectMeta{Name: "l1", Namespace: "t", Finalizers: []string{fleetv1alpha1.LeaseFinalizer}},
			Spec:       leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
			Status:     status,
		}
		var sent []client.Patch
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(lease).WithStatusSubresource(lease).
			WithInterceptorFuncs(interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
					sent = append(sent, p)
					err := cl.SubResource(sub).Patch(ctx, obj, p, opts...)
					if _, api := err.(apierrors.APIStatus); err != nil && !api {
						// The fake client returns the patch library's own
						// error; the API server answers a JSON patch it could
						// not apply with a 422 and its words dropped.
						return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", schema.GroupResource{}, "", err.Error(), 0, false)
					}
					return err
				},
			}).Build()
		read := func() *leasingv1alpha1.MacNodeLease {
			t.Helper()
			got := &leasingv1alpha1.MacNodeLease{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(lease), got); err != nil {
				t.Fatal(err)
			}
			return got
		}
		return c, read, &sent
	}
	journaled := leasingv1alpha1.MacNodeLeaseStatus{Phase: leasingv1alpha1.LeaseBound,
		Audit: &fleetv1alpha1.AuditJournal{NextSequence: 3, Records: []fleetv1alpha1.AuditRecord{{Sequence: 1, Type: "created"}, {Sequence: 2, Type: "bound"}}}}
	// hold is the pass under test: Held, one more record, the finalizer off.
	hold := func(l *leasingv1alpha1.MacNodeLease) *Helper {
		h := NewHelper(l, nil)
		l.Status.Phase = leasingv1alpha1.LeaseHeld
		l.Status.Audit.Records = append(l.Status.Audit.Records, fleetv1alpha1.AuditRecord{Sequence: 3, Type: "held"})
		l.Status.Audit.NextSequence = 4
		l.Finalizers = nil
		h.LockStatusOn("/status/audit/nextSequence", int64(3))
		return h
	}

	t.Run("another writer's field moved since the read: the write goes, and keeps it", func(t *testing.T) {
		c, read, sent := setup(t, journaled)
		stale := read()
		other := read()
		other.Status.Reservations = []leasingv1alpha1.InstanceReservation{{UID: "u1", Name: "vm", At: metav1.Now()}}
		if err := c.Status().Update(ctx, other); err != nil {
			t.Fatal(err)
		}
		h := hold(stale)
		h.client = c
		if err := h.Patch(ctx, stale); err != nil {
			t.Fatalf("the journal did not move, yet: %v", err)
		}
		got := read()
		if got.Status.Phase != leasingv1alpha1.LeaseHeld || got.Status.Audit.NextSequence != 4 || len(got.Status.Audit.Records) != 3 || len(got.Finalizers) != 0 {
			t.Fatalf("stored %+v, finalizers %v; want Held, the third record, no finalizer", got.Status, got.Finalizers)
		}
		if len(got.Status.Reservations) != 1 {
			t.Fatalf("the reservations' write was lost: %+v", got.Status.Reservations)
		}
		if len(*sent) != 1 || (*sent)[0].Type() != types.JSONPatchType {
			t.Fatalf("want the pass's status sent as a JSON patch, got %d patches", len(*sent))
		}
	})

	t.Run("the journal moved since the read: a Conflict, and nothing written", func(t *testing.T) {
		c, read, _ := setup(t, journaled)
		stale := read()
		other := read()
		other.Status.Audit.Records = append(other.Status.Audit.Records, fleetv1alpha1.AuditRecord{Sequence: 3, Type: "held"})
		other.Status.Audit.NextSequence = 4
		if err := c.Status().Update(ctx, other); err != nil {
			t.Fatal(err)
		}
		h := hold(stale)
		h.client = c
		if err := h.Patch(ctx, stale); !apierrors.IsConflict(errors.Unwrap(err)) {
			t.Fatalf("a stale journal: %v, want a Conflict", err)
		}
		if got := read(); got.Status.Phase != leasingv1alpha1.LeaseBound || len(got.Finalizers) != 1 {
			t.Fatalf("after the conflict: phase %s, finalizers %v; want Bound and the finalizer kept", got.Status.Phase, got.Finalizers)
		}
	})

	t.Run("an empty status when read: locked on the resourceVersion", func(t *testing.T) {
		c, read, sent := setup(t, leasingv1alpha1.MacNodeLeaseStatus{})
		stale := read()
		other := read()
		other.Status.Reservations = []leasingv1alpha1.InstanceReservation{{UID: "u1", Name: "vm", At: metav1.Now()}}
		if err := c.Status().Update(ctx, other); err != nil {
			t.Fatal(err)
		}
		h := NewHelper(stale, c)
		stale.Status.Phase = leasingv1alpha1.LeaseBound
		stale.Status.Audit = &fleetv1alpha1.AuditJournal{NextSequence: 2, Records: []fleetv1alpha1.AuditRecord{{Sequence: 1, Type: "created"}}}
		h.LockStatusOn("/status/audit", nil)
		if err := h.Patch(ctx, stale); !apierrors.IsConflict(errors.Unwrap(err)) {
			t.Fatalf("a stale read of an empty status: %v, want a Conflict", err)
		}
		if (*sent)[len(*sent)-1].Type() != types.MergePatchType {
			t.Fatal("want a merge patch locked on the resourceVersion")
		}
		fresh := read()
		h = NewHelper(fresh, c)
		fresh.Status.Phase = leasingv1alpha1.LeaseBound
		h.LockStatusOn("/status/audit", nil)
		if err := h.Patch(ctx, fresh); err != nil {
			t.Fatalf("positive control, a fresh read: %v", err)
		}
	})
}
