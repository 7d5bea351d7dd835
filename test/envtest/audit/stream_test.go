package audit

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit"
	"github.com/boualleiguie/macrack-operator/internal/cli"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

const class = "m4-audit"

// startOperator runs the operator, exporting into the JetStream at url.
func startOperator(at time.Time) *harness.Operator {
	GinkgoHelper()
	sink, err := audit.NewJetStream(ctx, audit.JetStreamOptions{URL: nats.URL()})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(sink.Close)
	op, err := env.StartOperator(harness.OperatorOptions{
		Start: at, MaxConcurrentReconciles: 4, AuditSink: sink,
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName("operator"),
	})
	Expect(err).NotTo(HaveOccurred())
	return op
}

func createLease(tenant string) *leasingv1alpha1.MacNodeLease {
	GinkgoHelper()
	_ = admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}})
	l := &leasingv1alpha1.MacNodeLease{
		ObjectMeta: metav1.ObjectMeta{Name: "mini", Namespace: tenant},
		Spec:       leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h"},
	}
	Expect(admin.Create(ctx, l)).To(Succeed())
	return l
}

func phaseOf(l *leasingv1alpha1.MacNodeLease) func() leasingv1alpha1.MacNodeLeasePhase {
	return func() leasingv1alpha1.MacNodeLeasePhase {
		cur := &leasingv1alpha1.MacNodeLease{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(l), cur); err != nil {
			return ""
		}
		return cur.Status.Phase
	}
}

// gauge reads one series of the operator's registry.
func gauge(op *harness.Operator, name string, labels map[string]string) float64 {
	GinkgoHelper()
	fams, err := op.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			return value(m)
		}
	}
	return math.NaN()
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return math.NaN()
}

var _ = Describe("The audit stream, with JetStream killed for more than five minutes and the operator restarted", Ordered, func() {
	It("delivers every transition's record at least once, with no gaps, and the lag returns to 0", func() {
		t0 := time.Now().UTC().Truncate(time.Second)
		_, err := harness.CreateClass(ctx, admin, class, 2)
		Expect(err).NotTo(HaveOccurred())
		var chassis []string
		for range 4 {
			name, err := harness.CreateChassis(ctx, admin, class, harness.GoodFacts())
			Expect(err).NotTo(HaveOccurred())
			chassis = append(chassis, name)
		}
		op := startOperator(t0)

		By("binding two leases while the sink is up")
		early := createLease("tenant-early")
		late := createLease("tenant-late")
		Eventually(phaseOf(early)).Should(Equal(leasingv1alpha1.LeaseBound))
		Eventually(phaseOf(late)).Should(Equal(leasingv1alpha1.LeaseBound))
		Eventually(func() float64 {
			return gauge(op, "macrack_audit_backlog_records", map[string]string{"source": "journal"})
		}).Should(BeZero())

		By("killing nats-server, then binding, holding and releasing with nowhere to publish")
		Expect(nats.Kill()).To(Succeed())
		down := op.Clock.Now()
		during := createLease("tenant-during")
		Eventually(phaseOf(during)).Should(Equal(leasingv1alpha1.LeaseBound))
		Expect(admin.Delete(ctx, early)).To(Succeed()) // before earliestReleaseAt: Held
		Eventually(phaseOf(early)).Should(Equal(leasingv1alpha1.LeaseHeld))
		Eventually(func() float64 {
			return gauge(op, "macrack_audit_backlog_records", map[string]string{"source": "journal"})
		}).Should(BeNumerically(">", 0))
		// The exporter backs off on the operator's clock: a minute of it at
		// a time, half the outage before the restart.
		for range 3 {
			op.Step(61 * time.Second)
			time.Sleep(200 * time.Millisecond) // let a retry fail against the dead server
		}
		Expect(gauge(op, "macrack_audit_publish_failures_total", nil)).To(BeNumerically(">", 0))

		By("restarting the operator in the middle of the outage")
		Expect(op.Stop()).To(Succeed())
		op = startOperator(op.Clock.Now())
		for range 3 {
			op.Step(61*time.Second, early, late, during)
			time.Sleep(200 * time.Millisecond)
		}
		By("passing earliestReleaseAt: the held lease is released, and a second one deleted after it goes at once")
		op.Step(24*time.Hour, early, late, during)
		Eventually(phaseOf(early)).Should(Equal(leasingv1alpha1.LeaseReleased))
		Expect(admin.Delete(ctx, late)).To(Succeed())
		Eventually(phaseOf(late)).Should(Equal(leasingv1alpha1.LeaseReleased))
		Expect(op.Clock.Now().Sub(down)).To(BeNumerically(">=", 5*time.Minute))
		// The released leases wait for their records: the audit finalizer.
		for _, l := range []*leasingv1alpha1.MacNodeLease{early, late} {
			Eventually(func() []string {
				cur := &leasingv1alpha1.MacNodeLease{}
				Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), cur)).To(Succeed())
				return cur.Finalizers
			}).Should(Equal([]string{fleetv1alpha1.AuditFinalizer}), "lease %s waits for its records alone", l.Namespace)
		}
		want := spansFromStatus(early, late, during)
		Expect(gauge(op, "macrack_audit_export_lag_seconds", nil)).To(BeNumerically(">=", 5*60))

		By("bringing nats-server back: the exporter catches up on its next retry")
		Expect(nats.Start()).To(Succeed())
		Eventually(func() float64 {
			op.Step(61 * time.Second)
			return gauge(op, "macrack_audit_backlog_records", map[string]string{"source": "journal"})
		}).WithTimeout(90 * time.Second).WithPolling(time.Second).Should(BeZero())
		Expect(gauge(op, "macrack_audit_export_lag_seconds", nil)).To(BeZero())
		for _, l := range []*leasingv1alpha1.MacNodeLease{early, late} {
			Eventually(func() bool {
				return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(l), &leasingv1alpha1.MacNodeLease{}))
			}).Should(BeTrue(), "a released lease goes once its last record is out")
		}

		By("reading the stream: every object's records, numbered from 1 without a gap")
		r, err := audit.OpenReader(ctx, nats.URL(), "")
		Expect(err).NotTo(HaveOccurred())
		defer r.Close()
		events, err := r.All(ctx)
		Expect(err).NotTo(HaveOccurred())
		seqs := map[string][]int64{}
		typesOf := map[string][]string{}
		for _, ev := range dedupe(events) {
			parts := strings.Split(ev.ID(), "/")
			Expect(parts).To(HaveLen(3), ev.ID())
			key := parts[0] + "/" + parts[1]
			typesOf[key] = append(typesOf[key], strings.TrimPrefix(ev.Type(), "io.macrack."))
			if n, err := strconv.ParseInt(parts[2], 10, 64); err == nil {
				seqs[key] = append(seqs[key], n)
			}
		}
		GinkgoWriter.Printf("stream: %d records, %d ids, %d objects\n", len(events), len(dedupe(events)), len(seqs))
		for key, s := range seqs {
			sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
			for i, n := range s {
				Expect(n).To(Equal(int64(i+1)), "%s: records %v have a gap", key, s)
			}
		}
		for _, l := range []*leasingv1alpha1.MacNodeLease{early, late} {
			Expect(typesOf["lease/"+string(l.UID)]).To(ContainElements("lease.created", "lease.bound", "lease.released", "lease.deleted"), "lease %s", l.Namespace)
		}
		Expect(typesOf["lease/"+string(early.UID)]).To(ContainElement("lease.held"))
		Expect(typesOf["lease/"+string(during.UID)]).To(ContainElements("lease.created", "lease.bound"))
		// Nothing stored is missing: each live object's journal ends where
		// the stream does.
		cur := &leasingv1alpha1.MacNodeLease{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(during), cur)).To(Succeed())
		Expect(seqs["lease/"+string(during.UID)]).To(HaveLen(int(cur.Status.Audit.NextSequence - 1)))
		Expect(controllerutil.ContainsFinalizer(cur, fleetv1alpha1.AuditFinalizer)).To(BeTrue())
		for _, name := range chassis {
			mn := &fleetv1alpha1.MacNode{}
			Expect(admin.Get(ctx, types.NamespacedName{Name: name}, mn)).To(Succeed())
			Expect(mn.Status.Audit).NotTo(BeNil())
			Expect(seqs["chassis/"+string(mn.UID)]).To(HaveLen(int(mn.Status.Audit.NextSequence-1)), "chassis %s", name)
			Expect(mn.Status.Audit.ExportedSequence).To(Equal(mn.Status.Audit.NextSequence - 1))
		}

		By("billing from the stream with macrackctl, as the leases' own timestamps say")
		to := op.Clock.Now()
		var out, errOut strings.Builder
		code := cli.Main([]string{"billing", "report", "--nats", nats.URL(), "-o", "json",
			"--from", t0.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--now", to.Format(time.RFC3339)}, &out, &errOut)
		Expect(code).To(BeZero(), errOut.String())
		var report cli.BillingReport
		Expect(json.Unmarshal([]byte(out.String()), &report)).To(Succeed())
		Expect(report.Usage).To(HaveLen(len(want)))
		for _, u := range report.Usage {
			Expect(want).To(HaveKey(u.Tenant))
			Expect(u.ChassisHours).To(BeNumerically("~", want[u.Tenant].hoursUntil(to), 1e-6), "tenant %s", u.Tenant)
			Expect(u.ChassisHours).To(BeNumerically(">", 0))
		}
		// The same sums from a stream that holds every record twice.
		doubled, err := audit.Billing(append(events, events...), t0, to)
		Expect(err).NotTo(HaveOccurred())
		Expect(doubled).To(Equal(report.Usage))
		Expect(op.Stop()).To(Succeed())
	})
})

// span is a lease's bound time, by its own status: a figure the stream
// does not decide.
type span struct{ bound, released time.Time }

func spansFromStatus(ls ...*leasingv1alpha1.MacNodeLease) map[string]span {
	GinkgoHelper()
	out := map[string]span{}
	for _, l := range ls {
		cur := &leasingv1alpha1.MacNodeLease{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), cur)).To(Succeed())
		Expect(cur.Status.BoundAt).NotTo(BeNil())
		sp := span{bound: cur.Status.BoundAt.Time}
		if cur.Status.ReleasedAt != nil {
			sp.released = cur.Status.ReleasedAt.Time
		}
		out[cur.Namespace] = sp
	}
	return out
}

// hoursUntil is the span's chassis-hours in a window ending at to.
func (s span) hoursUntil(to time.Time) float64 {
	end := s.released
	if end.IsZero() {
		end = to
	}
	return end.Sub(s.bound).Hours()
}

func dedupe(events []cloudevents.Event) []cloudevents.Event {
	seen := map[string]bool{}
	var out []cloudevents.Event
	for _, ev := range events {
		if !seen[ev.ID()] {
			seen[ev.ID()] = true
			out = append(out, ev)
		}
	}
	return out
}
