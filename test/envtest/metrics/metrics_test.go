package metrics

import (
	"encoding/json"
	"path/filepath"
	"sort"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/event"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// The fleet of the suite: the agent's chassis, of leasedClass, leased, and
// a spare of spareClass, Ready; one golden pre-pulled onto leasedClass.
const (
	leasedClass = "metrics-m4"
	spareClass  = "metrics-m4-pro"
	goldenName  = "metrics-sequoia"
)

// scrape gathers the operator's registry, as its /metrics would serve it.
func scrape() map[string]*dto.MetricFamily {
	GinkgoHelper()
	gathered, err := op.Registry.Gather()
	Expect(err).NotTo(HaveOccurred(), "the operator's registry does not gather")
	return families(gathered)
}

// value is the counter or gauge value of family name's series whose labels
// include labels, or -1 when there is none.
func value(scraped map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	for _, m := range scraped[name].GetMetric() {
		match := true
		for k, v := range labels {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || lp.GetName() == k && lp.GetValue() == v
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		default:
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

func valueOf(name string, labels map[string]string) func() float64 {
	return func() float64 { return value(scrape(), name, labels) }
}

var _ = Describe("The operator's metrics", Ordered, func() {
	var (
		spare  string
		tenant *harness.Tenant
		lease  *leasingv1alpha1.MacNodeLease
		inst   *computev1alpha1.MacOSInstance
	)

	BeforeAll(func() {
		for _, c := range []struct {
			name string
			vms  int32
		}{{leasedClass, 2}, {spareClass, 1}} {
			_, err := harness.CreateClass(ctx, admin, c.name, c.vms)
			Expect(err).NotTo(HaveOccurred())
		}
		var err error
		spare, err = harness.CreateChassis(ctx, admin, spareClass, harness.GoodFacts())
		Expect(err).NotTo(HaveOccurred())

		ref, err := env.PushGolden(ctx, goldenName, 60<<30)
		Expect(err).NotTo(HaveOccurred())
		Expect(admin.Create(ctx, &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: goldenName},
			Spec: fleetv1alpha1.MacOSImageSpec{Source: ref, PlainHTTP: true,
				PrePull: &fleetv1alpha1.PrePull{NodeClassNames: []string{leasedClass}}}})).To(Succeed())
		Eventually(func() bool {
			img := &fleetv1alpha1.MacOSImage{}
			Expect(admin.Get(ctx, client.ObjectKey{Name: goldenName}, img)).To(Succeed())
			return conditions.IsTrue(img.Status.Conditions, fleetv1alpha1.ConditionResolved)
		}).Should(BeTrue(), "the golden never resolved")

		serial := harness.NewSerial()
		agent, err = env.StartAgent(harness.AgentOptions{Serial: serial, Class: leasedClass, HelperPath: helperPath,
			Heartbeat: 2 * time.Second, Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName(serial)})
		Expect(err).NotTo(HaveOccurred())
		for _, n := range []string{agent.Node, spare} {
			Eventually(func() fleetv1alpha1.MacNodePhase {
				mn := &fleetv1alpha1.MacNode{}
				_ = admin.Get(ctx, client.ObjectKey{Name: n}, mn)
				return mn.Status.Phase
			}).Should(Equal(fleetv1alpha1.MacNodeReady), "chassis %s never became Ready", n)
		}
		tenant, err = env.NewTenant(ctx, "metrics")
		Expect(err).NotTo(HaveOccurred())
	})

	It("counts chassis by phase and class, every phase present, from the cache", func() {
		Eventually(valueOf("macrack_chassis", map[string]string{"class": spareClass, "phase": "Ready"})).Should(Equal(1.0))
		Eventually(valueOf("macrack_chassis", map[string]string{"class": leasedClass, "phase": "Ready"})).Should(Equal(1.0))
		scraped := scrape()
		Expect(scraped["macrack_chassis"].GetMetric()).To(HaveLen(2*7), "seven phases for each of the two classes")
		Expect(value(scraped, "macrack_chassis", map[string]string{"class": leasedClass, "phase": "Leased"})).To(Equal(0.0))
		Expect(value(scraped, "macrack_leases", map[string]string{"phase": "Bound"})).To(Equal(0.0))
	})

	It("counts a bound lease, its chassis leased, and a refused lease as a denial by rule", func() {
		lease = &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: tenant.Namespace},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: leasedClass, MinimumDuration: "24h"}}
		Expect(tenant.Client.Create(ctx, lease)).To(Succeed())
		Eventually(func() leasingv1alpha1.MacNodeLeasePhase {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(lease), lease)).To(Succeed())
			return lease.Status.Phase
		}).Should(Equal(leasingv1alpha1.LeaseBound))
		Expect(lease.Status.NodeName).To(Equal(agent.Node))
		Eventually(valueOf("macrack_chassis", map[string]string{"class": leasedClass, "phase": "Leased"})).Should(Equal(1.0))
		Eventually(valueOf("macrack_leases", map[string]string{"phase": "Bound"})).Should(Equal(1.0))

		floor := map[string]string{"rule": "lease.floor", "code": "lease.floor"}
		before := max(value(scrape(), "macrack_policy_denials_total", floor), 0)
		short := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "short", Namespace: tenant.Namespace},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: leasedClass, MinimumDuration: "1h"}}
		harness.ExpectWebhookDenial(tenant.Client.Create(ctx, short), "vmacnodelease.macrack.io", "lease.floor")
		Expect(value(scrape(), "macrack_policy_denials_total", floor)).To(BeNumerically(">=", before+1))
		Expect(value(scrape(), "macrack_admission_requests_total", map[string]string{"kind": "MacNodeLease", "result": "422"})).To(BeNumerically(">=", 1))
	})

	It("exports the agent's pull counters: a pre-pull, then an instance cloned from the cache, a hit", func() {
		image := map[string]string{"image": goldenName}
		Eventually(valueOf("macrack_image_pull_duration_seconds", image), "60s").Should(Equal(1.0), "the pre-pull never completed")
		Expect(value(scrape(), "macrack_image_pull_bytes_total", image)).To(BeNumerically(">", harness.SimGoldenDisk/1000),
			"a pull fetches its chunks, mostly zeros, compressed")
		Expect(value(scrape(), "macrack_image_cache_hits_total", image)).To(Equal(0.0))

		inst = &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm-1", Namespace: tenant.Namespace},
			Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: lease.Name, ImageName: goldenName, CPU: 4,
				Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("200Gi")}}
		Expect(tenant.Client.Create(ctx, inst)).To(Succeed())
		Eventually(func() computev1alpha1.VMPhase {
			got := &computev1alpha1.MacOSInstance{}
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(inst), got)).To(Succeed())
			if got.Status.Runtime == nil {
				return ""
			}
			return got.Status.Runtime.Phase
		}, "60s").Should(Equal(computev1alpha1.VMRunning))
		Eventually(valueOf("macrack_image_cache_hits_total", image)).Should(Equal(1.0), "the instance found its golden in the cache")
		Expect(value(scrape(), "macrack_image_pull_duration_seconds", image)).To(Equal(1.0), "and pulled nothing")
	})

	It("streams the instance's records, from created to its wipe's evidence and deleted, and the refusal with its rule", func() {
		Expect(admin.Delete(ctx, inst)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(inst), &computev1alpha1.MacOSInstance{}))
		}, "60s").Should(BeTrue(), "the instance goes once wiped and its last record is out")
		byID := map[string]cloudevents.Event{}
		var types []string
		for _, line := range strings.Split(strings.TrimSpace(records.String()), "\n") {
			var ev cloudevents.Event
			Expect(json.Unmarshal([]byte(line), &ev)).To(Succeed(), line)
			if strings.HasPrefix(ev.ID(), "instance/"+string(inst.UID)+"/") {
				types = append(types, ev.Type())
				byID[ev.ID()] = ev
			}
			if ev.Type() == "io.macrack.denial.webhook" {
				byID["denial"] = ev
			}
		}
		Expect(types).To(ContainElements("io.macrack.instance.created", "io.macrack.instance.placed", "io.macrack.instance.running",
			"io.macrack.instance.stopped", "io.macrack.instance.wiped", "io.macrack.instance.deleted"))
		var wiped event.Data
		for _, ev := range byID {
			if ev.Type() == "io.macrack.instance.wiped" {
				Expect(ev.DataAs(&wiped)).To(Succeed())
			}
		}
		Expect(wiped.Attributes).To(HaveKey("method"))
		Expect(wiped.Attributes["bytes"]).NotTo(BeEmpty())
		Expect(wiped.Attributes["tenant"]).To(Equal(inst.Namespace))
		var denial event.Data
		Expect(byID).To(HaveKey("denial"), "the refused 1h lease")
		Expect(byID["denial"].DataAs(&denial)).To(Succeed())
		Expect(denial.Attributes).To(HaveKeyWithValue("rule", "lease.floor"))
		Expect(denial.Attributes["revision"]).To(Equal(op.Engine.Revision()))
	})

	It("exports every metric the Grafana dashboard queries", func() {
		d, err := loadDashboard(filepath.Join(harness.RepoRoot(), dashboardFile))
		Expect(err).NotTo(HaveOccurred())
		scraped := scrape()
		var names []string
		var missing []string
		for title, ns := range d.metricsByPanel() {
			names = append(names, ns...)
			for _, n := range missingMetrics(ns, scraped) {
				missing = append(missing, n+" (panel "+title+")")
			}
		}
		Expect(names).NotTo(BeEmpty())
		// The controls, with the same checker and the same scrape: a name
		// nothing exports is missing; one the scrape has is not.
		Expect(missingMetrics([]string{"macrack_not_a_metric"}, scraped)).To(Equal([]string{"macrack_not_a_metric"}))
		Expect(missingMetrics([]string{"macrack_chassis", "macrack_policy_decision_duration_seconds_bucket"}, scraped)).To(BeEmpty())
		sort.Strings(missing)
		Expect(missing).To(BeEmpty(), "the dashboard queries metrics the operator does not export:\n  %s", strings.Join(missing, "\n  "))
	})
})
