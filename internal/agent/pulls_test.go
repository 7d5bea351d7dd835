package agent

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/agent/images"
	"github.com/boualleiguie/macrack-operator/internal/agent/report"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

// The pull counters grow across the agent's restarts: the image report
// carries on from what the MacNode reports, and the facts report, which
// names every other field, leaves them alone.
func TestThePullCountersCarryOnFromTheLastRunAndSurviveAFactsReport(t *testing.T) {
	scheme, err := macrackscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	earlier := []fleetv1alpha1.ImagePullCounters{{Name: "sequoia", Pulls: 2, PullMilliseconds: 3000, Bytes: 100, CacheHits: 4}}
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: testNode},
		Spec:   fleetv1alpha1.MacNodeSpec{Serial: "C02TEST00001", NodeClassName: "m4-test"},
		Status: fleetv1alpha1.MacNodeStatus{Reported: &fleetv1alpha1.ReportedFacts{Chip: "M4", ImagePulls: earlier}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mn).WithStatusSubresource(&fleetv1alpha1.MacNode{}).Build()
	pulls := func() []fleetv1alpha1.ImagePullCounters {
		t.Helper()
		got := &fleetv1alpha1.MacNode{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: testNode}, got); err != nil {
			t.Fatal(err)
		}
		return got.Status.Reported.ImagePulls
	}

	root := t.TempDir()
	cache := &images.Cache{Root: root}
	store := &images.Store{Puller: &images.Puller{Root: root, Cache: cache}, Cache: cache}
	store.CountCacheHit("sequoia") // this run's, before its first report
	cfg := Config{NodeName: testNode, Clock: clocktesting.NewFakeClock(time.Now()),
		Facts: host.StaticFacts{Reported: &fleetv1alpha1.ReportedFacts{Chip: "M4"}}}
	ctx := context.Background()
	rep := &report.Reporter{Client: c, NodeName: testNode}
	chassis := &images.Chassis{NodeName: testNode, Direct: c, Report: rep, Clock: cfg.Clock}
	if err := chassis.PublishReport(ctx, store); err != nil {
		t.Fatal(err)
	}
	if err := rep.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := fleetv1alpha1.ImagePullCounters{Name: "sequoia", Pulls: 2, PullMilliseconds: 3000, Bytes: 100, CacheHits: 5}
	if got := pulls(); len(got) != 1 || got[0] != want {
		t.Fatalf("reported %+v, want %+v: the earlier run's counters plus this run's hit", got, want)
	}

	if err := cfg.reportFactsOnce(ctx, rep, nil); err != nil {
		t.Fatal(err)
	}
	if got := pulls(); len(got) != 1 || got[0] != want {
		t.Fatalf("after a facts report: %+v, want %+v kept", got, want)
	}
}
