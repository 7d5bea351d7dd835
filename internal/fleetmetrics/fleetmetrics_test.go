package fleetmetrics

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

func reader(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	scheme, err := macrackscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

func class(name string) *fleetv1alpha1.MacNodeClass {
	return &fleetv1alpha1.MacNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func chassis(name, class string, phase fleetv1alpha1.MacNodePhase, pulls ...fleetv1alpha1.ImagePullCounters) *fleetv1alpha1.MacNode {
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: strings.ToUpper(name), NodeClassName: class}}
	mn.Status.Phase = phase
	if pulls != nil {
		mn.Status.Reported = &fleetv1alpha1.ReportedFacts{ImagePulls: pulls}
	}
	return mn
}

func lease(name string, phase leasingv1alpha1.MacNodeLeasePhase) *leasingv1alpha1.MacNodeLease {
	l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant-a"}}
	l.Status.Phase = phase
	return l
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// scrape gathers c, pedantically, as sorted lines `name{label=value,...}
// value`, a histogram's value as its count and sum (and its bucket count).
func scrape(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			series := f.GetName() + "{" + strings.Join(labels, ",") + "} "
			switch f.GetType().String() {
			case "HISTOGRAM":
				h := m.GetHistogram()
				out = append(out, series+"count="+num(float64(h.GetSampleCount()))+" sum="+num(h.GetSampleSum())+
					" buckets="+strconv.Itoa(len(h.GetBucket())))
			case "COUNTER":
				out = append(out, series+"counter="+num(m.GetCounter().GetValue()))
			default:
				out = append(out, series+"gauge="+num(m.GetGauge().GetValue()))
			}
		}
	}
	sort.Strings(out)
	return out
}

func expectLines(t *testing.T, got, want []string) {
	t.Helper()
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("scraped:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// Every phase of every class is exported, at 0 where no chassis is: a
// class without chassis, and the class of a chassis whose class is gone.
// A chassis the operator has not assessed yet is Pending.
func TestChassisAreCountedByPhaseAndClassWithEveryPhasePresent(t *testing.T) {
	c := &Chassis{Reader: reader(t, class("m4"), class("m4-pro"),
		chassis("c02a", "m4", fleetv1alpha1.MacNodeLeased), chassis("c02b", "m4", fleetv1alpha1.MacNodeLeased),
		chassis("c02c", "m4", fleetv1alpha1.MacNodeQuarantined), chassis("c02d", "m4", ""),
		chassis("c02e", "gone", fleetv1alpha1.MacNodeReady))}
	want := map[string]map[fleetv1alpha1.MacNodePhase]int{
		"m4":     {fleetv1alpha1.MacNodeLeased: 2, fleetv1alpha1.MacNodeQuarantined: 1, fleetv1alpha1.MacNodePending: 1},
		"m4-pro": {},
		"gone":   {fleetv1alpha1.MacNodeReady: 1},
	}
	var lines []string
	for cl, byPhase := range want {
		for _, p := range ChassisPhases {
			lines = append(lines, "macrack_chassis{class="+cl+",phase="+string(p)+"} gauge="+strconv.Itoa(byPhase[p]))
		}
	}
	expectLines(t, scrape(t, c), lines)
	if len(lines) != 3*7 {
		t.Fatalf("control: %d series, want 21", len(lines))
	}
}

// Every lease phase is exported, at 0 where no lease is; a lease not
// reconciled yet is Pending.
func TestLeasesAreCountedByPhaseWithEveryPhasePresent(t *testing.T) {
	c := &Leases{Reader: reader(t, lease("a", leasingv1alpha1.LeaseBound), lease("b", leasingv1alpha1.LeaseBound),
		lease("c", leasingv1alpha1.LeaseHeld), lease("d", ""))}
	expectLines(t, scrape(t, c), []string{
		"macrack_leases{phase=Pending} gauge=1",
		"macrack_leases{phase=Bound} gauge=2",
		"macrack_leases{phase=Held} gauge=1",
		"macrack_leases{phase=Released} gauge=0",
	})
	expectLines(t, scrape(t, &Leases{Reader: reader(t)}), []string{
		"macrack_leases{phase=Pending} gauge=0",
		"macrack_leases{phase=Bound} gauge=0",
		"macrack_leases{phase=Held} gauge=0",
		"macrack_leases{phase=Released} gauge=0",
	})
}

// The agents' cumulative counters are exported as counters summed over
// chassis, by golden, and the pulls as a histogram of count and sum.
func TestTheAgentsPullCountersAreSummedOverChassis(t *testing.T) {
	c := &ImagePulls{Reader: reader(t,
		chassis("c02a", "m4", fleetv1alpha1.MacNodeLeased,
			fleetv1alpha1.ImagePullCounters{Name: "sequoia", Pulls: 2, PullMilliseconds: 90_500, Bytes: 3 << 30, CacheHits: 5},
			fleetv1alpha1.ImagePullCounters{Name: "sonoma", Pulls: 1, PullMilliseconds: 1_000, Bytes: 100}),
		chassis("c02b", "m4", fleetv1alpha1.MacNodeReady,
			fleetv1alpha1.ImagePullCounters{Name: "sequoia", Pulls: 1, PullMilliseconds: 30_000, Bytes: 1 << 30, CacheHits: 2}),
		chassis("c02c", "m4", fleetv1alpha1.MacNodePending))}
	expectLines(t, scrape(t, c), []string{
		"macrack_image_pull_bytes_total{image=sequoia} counter=" + num(4<<30),
		"macrack_image_pull_bytes_total{image=sonoma} counter=100",
		"macrack_image_pull_duration_seconds{image=sequoia} count=3 sum=120.5 buckets=0",
		"macrack_image_pull_duration_seconds{image=sonoma} count=1 sum=1 buckets=0",
		"macrack_image_cache_hits_total{image=sequoia} counter=7",
		"macrack_image_cache_hits_total{image=sonoma} counter=0",
	})
	if got := scrape(t, &ImagePulls{Reader: reader(t, chassis("c02c", "m4", fleetv1alpha1.MacNodeReady))}); len(got) != 0 {
		t.Fatalf("no agent reported a pull, yet: %v", got)
	}
}

// A cache that cannot list makes the scrape go without the collector's
// series, not fail: the rest of the operator's metrics are still served.
func TestAFailedListLeavesTheSeriesOutAndTheScrapeWhole(t *testing.T) {
	broken := interceptor.NewClient(reader(t, class("m4"), chassis("c02a", "m4", fleetv1alpha1.MacNodeReady)), interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("the cache is not started")
		}})
	for _, c := range Collectors(broken, logr.Discard()) {
		if got := scrape(t, c); len(got) != 0 {
			t.Errorf("%T exported %v from a cache that cannot list", c, got)
		}
	}
	// The control: the same objects, listable.
	if got := scrape(t, &Chassis{Reader: reader(t, class("m4"), chassis("c02a", "m4", fleetv1alpha1.MacNodeReady))}); len(got) != 7 {
		t.Fatalf("control: %d series, want 7", len(got))
	}
}
