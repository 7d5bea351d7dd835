package sink

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// t0 is the tests' clock.
var t0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func newLease() *leasingv1alpha1.MacNodeLease {
	l := &leasingv1alpha1.MacNodeLease{}
	l.Namespace, l.Name, l.UID = "tenant-a", "ci", "lease-uid-1"
	l.CreationTimestamp = metav1.NewTime(at(0))
	return l
}
