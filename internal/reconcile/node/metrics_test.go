package node

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// family is the metric family name of m's collectors, or nil.
func family(t *testing.T, m *Metrics, name string) *dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

// timeInQuarantine is the histogram's count and sum.
func timeInQuarantine(t *testing.T, m *Metrics) (uint64, float64) {
	t.Helper()
	f := family(t, m, "macrack_chassis_quarantine_duration_seconds")
	if f == nil || len(f.GetMetric()) != 1 {
		t.Fatalf("macrack_chassis_quarantine_duration_seconds: %v, want one histogram", f)
	}
	h := f.GetMetric()[0].GetHistogram()
	return h.GetSampleCount(), h.GetSampleSum()
}

// serialSeries is the value of family name's series for serial, and
// whether it exists.
func serialSeries(t *testing.T, m *Metrics, name, serial string) (float64, bool) {
	t.Helper()
	f := family(t, m, name)
	for _, s := range f.GetMetric() {
		for _, lp := range s.GetLabel() {
			if lp.GetName() == "serial" && lp.GetValue() == serial {
				return s.GetCounter().GetValue() + s.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// A recovery observes its time in quarantine, recoveredAt − quarantinedAt
// by the operator's clock, once: not when its status write failed, and
// not again on the passes after.
func TestARecoveryObservesItsTimeInQuarantineOnceItsWriteLanded(t *testing.T) {
	l := newLoop(t, true)
	if n, ok := serialSeries(t, l.r.Metrics, "macrack_chassis_quarantines_total", "C02A"); !ok || n != 0 {
		t.Fatalf("before any quarantine: quarantines %v (series %v), want a series at 0", n, ok)
	}
	if n, ok := serialSeries(t, l.r.Metrics, "macrack_chassis_needs_attention", "C02A"); !ok || n != 0 {
		t.Fatalf("before any quarantine: needs attention %v (series %v), want a series at 0", n, ok)
	}
	l.beat()
	l.stuck()
	l.clock.Step(2 * time.Minute)
	l.stopped()
	l.clock.Step(3 * time.Minute)
	l.rebooted("boot-2")
	l.clock.Step(time.Minute)
	l.beat()
	if n, _ := timeInQuarantine(t, l.r.Metrics); n != 0 {
		t.Fatalf("before the recovery: %d observations, want 0", n)
	}

	// The pass that recovers the chassis loses its status write.
	conflict := apierrors.NewConflict(schema.GroupResource{Group: fleetv1alpha1.GroupVersion.Group, Resource: "macnodes"}, "c02a", nil)
	l.r.Client = interceptor.NewClient(l.c.(client.WithWatch), interceptor.Funcs{
		SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return conflict
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*fleetv1alpha1.MacNode); ok {
				return conflict
			}
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		}})
	if mn := l.probed(fleetv1alpha1.ProbePassed); mn.Status.Quarantine.RecoveredAt != nil {
		t.Fatal("control: the recovery was written despite the conflict")
	}
	if n, _ := timeInQuarantine(t, l.r.Metrics); n != 0 {
		t.Fatalf("after a recovery whose write failed: %d observations, want 0", n)
	}
	l.r.Client = l.c
	l.clock.Step(time.Minute)
	mn := l.pass()
	if mn.Status.Quarantine.Active() {
		t.Fatalf("the chassis did not recover: %+v", mn.Status.Quarantine)
	}
	want := mn.Status.Quarantine.RecoveredAt.Sub(mn.Status.Quarantine.QuarantinedAt.Time).Seconds()
	if want != 7*60 {
		t.Fatalf("control: recovered %vs after the quarantine, want 420s", want)
	}
	l.pass()
	l.pass()
	if n, sum := timeInQuarantine(t, l.r.Metrics); n != 1 || sum != want {
		t.Fatalf("after the recovery: %d observations summing %vs, want 1 of %vs", n, sum, want)
	}
	if n, _ := serialSeries(t, l.r.Metrics, "macrack_chassis_quarantines_total", "C02A"); n != 1 {
		t.Fatalf("quarantines %v, want 1", n)
	}
}

// A failed probe is another quarantine, not a recovery: no time observed.
func TestAFailedProbeObservesNoTimeInQuarantine(t *testing.T) {
	l := newLoop(t, true)
	l.beat()
	l.stuck()
	l.stopped()
	l.rebooted("boot-2")
	l.probed(fleetv1alpha1.ProbeFailed)
	l.pass()
	if n, _ := timeInQuarantine(t, l.r.Metrics); n != 0 {
		t.Fatalf("after a failed probe: %d observations, want 0", n)
	}
	if n, _ := serialSeries(t, l.r.Metrics, "macrack_chassis_quarantines_total", "C02A"); n != 2 {
		t.Fatalf("quarantines %v, want 2: the failed probe began another", n)
	}
}
