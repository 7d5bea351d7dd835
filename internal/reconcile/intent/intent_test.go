package intent

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
)

func TestAnIntendedWriteIsJudgedAsTheWebhookWouldJudgeIt(t *testing.T) {
	s := runtime.NewScheme()
	_ = leasingv1alpha1.AddToScheme(s)
	engine, err := policy.Load(context.Background(), policies.FS, policy.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	c := Checker{Client: fake.NewClientBuilder().WithScheme(s).Build(), Engine: engine, Clock: clocktesting.NewFakeClock(now), Identity: "operator"}
	old := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "t"},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"}}
	bound := old.DeepCopy()
	bound.Status.BoundAt = &metav1.Time{Time: now}
	for _, c2 := range []struct {
		name string
		era  time.Duration
		want []string
	}{
		{"an earliestReleaseAt 24h after boundAt is allowed", 24 * time.Hour, nil},
		{"an earliestReleaseAt 23h after boundAt is refused with lease.floor", 23 * time.Hour, []string{"lease.floor"}},
	} {
		t.Run(c2.name, func(t *testing.T) {
			b := bound.DeepCopy()
			b.Status.EarliestReleaseAt = &metav1.Time{Time: now.Add(c2.era)}
			d, err := c.StatusWrite(context.Background(), b, old, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := d.Codes()
			if len(got) != len(c2.want) || (len(got) > 0 && got[0] != c2.want[0]) {
				t.Fatalf("codes %v, want %v", got, c2.want)
			}
		})
	}
}
