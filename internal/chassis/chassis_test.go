package chassis

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

func TestFreedRecordsTheLeaseAndBoundsTheHistory(t *testing.T) {
	now := time.Date(2026, 6, 2, 13, 0, 0, 0, time.UTC)
	n := &fleetv1alpha1.MacNode{}
	for i := 0; i < HistoryLimit; i++ {
		n.Status.History = append(n.Status.History, fleetv1alpha1.LeaseRecord{LeaseName: fmt.Sprint(i)})
	}
	n.Status.Binding = &fleetv1alpha1.Binding{LeaseNamespace: "t", LeaseName: "l", LeaseUID: "u", BoundAt: metav1.NewTime(now.Add(-25 * time.Hour))}
	n.Status.Slots = []fleetv1alpha1.Slot{{Namespace: "t", Name: "ci-1", UID: "i"}}
	n.Status.Phase = fleetv1alpha1.MacNodeLeased

	got := Freed(n, now)
	if got.Status.Binding != nil || got.Status.Slots != nil || got.Status.Phase != fleetv1alpha1.MacNodeEnrolled {
		t.Fatalf("binding, slots and phase not reset: %+v", got.Status)
	}
	if len(got.Status.History) != HistoryLimit {
		t.Fatalf("history is %d long, want the limit %d", len(got.Status.History), HistoryLimit)
	}
	last := got.Status.History[HistoryLimit-1]
	if last.LeaseName != "l" || !last.ReleasedAt.Time.Equal(now) || got.Status.History[0].LeaseName != "1" {
		t.Fatalf("want the oldest record dropped and the lease appended, got first %q last %+v", got.Status.History[0].LeaseName, last)
	}
	if n.Status.Binding == nil {
		t.Fatal("the input was modified")
	}
}
