package admission

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/scheme"
)

func stored(uid, name string, deleting bool) map[string]any {
	meta := map[string]any{"uid": uid, "name": name}
	if deleting {
		meta["deletionTimestamp"] = "2026-06-01T12:00:00Z"
	}
	return map[string]any{"metadata": meta}
}

// A reservation counts while its instance is not stored and it is younger
// than the TTL; at the TTL exactly it no longer does.
func TestPendingReservations(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	ttl := leasingv1alpha1.ReservationTTL
	at := func(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago)) }
	entries := []leasingv1alpha1.InstanceReservation{
		{UID: "in-flight", Name: "a", At: at(time.Second)},
		{UID: "stored", Name: "b", At: at(time.Second)},
		{UID: "refused", Name: "c", At: at(ttl)},
		{UID: "almost", Name: "d", At: at(ttl - time.Second)},
	}
	got := pending(entries, []any{stored("stored", "b", false)}, now, ttl)
	var names []string
	for _, e := range got {
		names = append(names, e.Name)
	}
	if len(names) != 2 || names[0] != "a" || names[1] != "d" {
		t.Fatalf("pending = %v, want [a d]: the stored one counts as itself, the one at the TTL no more", names)
	}
	if got := pending(nil, nil, now, ttl); len(got) != 0 {
		t.Fatalf("pending of none = %v", got)
	}
}

// A name held by a stored instance that is not being deleted is taken; the
// instance's own uid, or one being deleted, does not take it.
func TestNameTaken(t *testing.T) {
	list := []any{stored("u-1", "a", false), stored("u-2", "gone", true)}
	for _, c := range []struct {
		name, uid string
		want      bool
	}{
		{"a", "u-9", true},
		{"a", "u-1", false},
		{"gone", "u-9", false},
		{"b", "u-9", false},
	} {
		if got := nameTaken(list, c.name, c.uid); got != c.want {
			t.Errorf("nameTaken(%s, %s) = %v, want %v", c.name, c.uid, got, c.want)
		}
	}
}

// An instance stored and deleted before the sweeper lists it drops its
// reservation once the sweeper has seen it stored; an unseen one, still in
// flight, keeps counting (the positive control).
func TestSweeperDropsTheReservationOfAnInstanceSeenStored(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	lease := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team"}}
	lease.Status.Reservations = []leasingv1alpha1.InstanceReservation{
		{UID: "gone", Name: "quick", At: metav1.NewTime(now)},
		{UID: "in-flight", Name: "slow", At: metav1.NewTime(now)},
	}
	sch, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(sch).
		WithObjects(lease).WithStatusSubresource(lease).
		WithIndex(&computev1alpha1.MacOSInstance{}, LeaseNameField, func(o client.Object) []string {
			return []string{o.(*computev1alpha1.MacOSInstance).Spec.LeaseName}
		}).Build()
	s := &Sweeper{Reservations: NewReservations(c, c), Cache: c, Clock: clk, Period: time.Second}
	key := client.ObjectKeyFromObject(lease)

	names := func() []string {
		got := &leasingv1alpha1.MacNodeLease{}
		if err := c.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range got.Status.Reservations {
			out = append(out, r.Name)
		}
		return out
	}
	if _, err := s.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if got := names(); len(got) != 2 {
		t.Fatalf("reservations = %v before any instance was seen, want both: nothing proves either stored", got)
	}
	s.Seen(key, types.UID("gone"))
	if _, err := s.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if got := names(); len(got) != 1 || got[0] != "slow" {
		t.Fatalf("reservations = %v, want [slow]: quick was seen stored, and deleted since", got)
	}
	if got := s.seen.of(key); len(got) != 0 {
		t.Fatalf("seen = %v after its reservation was dropped, want none kept", got)
	}
}

// A create retried under its name replaces its own reservation; another
// name's reservation still counts (the positive control), and so does every
// reservation when the name is not known yet.
func TestARetriedCreateReplacesItsOwnReservation(t *testing.T) {
	entries := []leasingv1alpha1.InstanceReservation{{UID: "first-try", Name: "a"}, {UID: "other", Name: "b"}}
	got := withoutName(entries, "a")
	if len(got) != 1 || got[0].Name != "b" {
		t.Fatalf("withoutName(a) = %v, want only b's", got)
	}
	if got := withoutName(entries, "c"); len(got) != 2 {
		t.Fatalf("withoutName(c) = %v, want both", got)
	}
	if got := withoutName(entries, ""); len(got) != 2 {
		t.Fatalf("withoutName(\"\") = %v, want both", got)
	}
	if len(entries) != 2 || entries[0].Name != "a" {
		t.Fatalf("the lease's own list was modified: %v", entries)
	}
}
