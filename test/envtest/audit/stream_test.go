package audit

import (
	"encoding/json"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/billing"
	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
	"github.com/boualleiguie/macrack-operator/internal/cli"
)

// The whole cluster goes down for longer than the duplicate window, with a
// record proposed and unacknowledged when it goes, and the operator restarts
// in the middle of it. JetStream forgets the record's id, and its subject,
// which holds one message, keeps the re-sent copy out: the stream stores it
// once whatever the time. The window is shrunk to a second, which the
// outage outlasts on the servers' clocks; the operator's clock runs more
// than ten minutes through it.
var _ = Describe("The audit stream, with the cluster down longer than the duplicate window and the operator restarted", func() {
	AfterEach(healCluster)

	It("delivers every transition's record once, with no gaps, and the lag returns to 0", func() {
		const window = time.Second
		t0 := clockAt
		chassis := createChassis(4)
		op := startOperator(sink.JetStreamOptions{DuplicateWindow: window})
		deletions := watchDeletions()

		By("binding two leases while the cluster is up")
		early := createLease("tenant-early")
		late := createLease("tenant-late")
		Eventually(phaseOf(early)).Should(Equal(leasingv1alpha1.LeaseBound))
		Eventually(phaseOf(late)).Should(Equal(leasingv1alpha1.LeaseBound))
		drained(op)
		streamLeader()
		info, err := cluster.StreamInfo(ctx, stream)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Config.Duplicates).To(Equal(window))
		Expect(info.Config.Replicas).To(Equal(3))

		By("catching a third lease's records between their proposal and their PubAck, and killing every server")
		var during *leasingv1alpha1.MacNodeLease
		catchProposal(func() { during = createLease("tenant-during") })
		Expect(cluster.Kill()).To(Succeed())
		down := op.Clock.Now()
		Eventually(phaseOf(during)).Should(Equal(leasingv1alpha1.LeaseBound))
		Expect(admin.Delete(ctx, early)).To(Succeed()) // before earliestReleaseAt: Held
		Eventually(phaseOf(early)).Should(Equal(leasingv1alpha1.LeaseHeld))
		Eventually(func() float64 { return backlog(op) }).Should(BeNumerically(">", 0))
		// The exporter backs off on the operator's clock: a minute of it at
		// a time, half the outage before the restart.
		for range 3 {
			op.Step(61 * time.Second)
			time.Sleep(200 * time.Millisecond) // let a retry fail against the dead servers
		}
		Expect(failures(op)).To(BeNumerically(">", 0))

		By("restarting the operator in the middle of the outage")
		stopOperator(op)
		op = startOperator(sink.JetStreamOptions{DuplicateWindow: window})
		for range 3 {
			op.Step(61*time.Second, early, late, during)
			time.Sleep(200 * time.Millisecond)
		}
		By("passing earliestReleaseAt: the held lease is released, and a second one deleted after it goes at once")
		op.Step(24*time.Hour, early, late, during)
		Eventually(phaseOf(early)).Should(Equal(leasingv1alpha1.LeaseReleased))
		Expect(admin.Delete(ctx, late)).To(Succeed())
		Eventually(phaseOf(late)).Should(Equal(leasingv1alpha1.LeaseReleased))
		Expect(op.Clock.Now().Sub(down)).To(BeNumerically(">=", 10*time.Minute))
		// The released leases wait for their records: the audit finalizer,
		// and the lease controller's, which it leaves for the exporter to
		// take off with its own once Released (issue 39). Without the
		// webhooks each controller adds its own, in either order.
		for _, l := range []*leasingv1alpha1.MacNodeLease{early, late} {
			Consistently(func() []string {
				cur := &leasingv1alpha1.MacNodeLease{}
				Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), cur)).To(Succeed())
				return cur.Finalizers
			}).WithTimeout(time.Second).Should(ConsistOf(fleetv1alpha1.LeaseFinalizer, fleetv1alpha1.AuditFinalizer), "lease %s waits for its records", l.Namespace)
		}
		Consistently(gone(early)).WithTimeout(time.Second).Should(BeFalse(), "no lease goes while its records wait")
		want := spansFromStatus(early, late, during)
		Expect(gauge(op, "macrack_audit_export_lag_seconds", nil)).To(BeNumerically(">=", 10*60))

		By("bringing the cluster back: the caught records are stored, never acknowledged, and their ids forgotten")
		for _, s := range cluster.Servers {
			Expect(s.Start()).To(Succeed())
		}
		_, err = cluster.WaitStream(ctx, stream, 2*time.Minute)
		Expect(err).NotTo(HaveOccurred())
		cur := &leasingv1alpha1.MacNodeLease{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(during), cur)).To(Succeed())
		Expect(cur.Status.Audit.ExportedSequence).To(BeZero(), "no record of %s was acknowledged", during.Namespace)
		// The proposal is in every server's log; after the restart a new
		// leader commits it with an entry of its own term, and applies it.
		var caught []cloudevents.Event
		Eventually(func() []cloudevents.Event {
			caught = nil
			for _, ev := range readStream() {
				if strings.HasPrefix(ev.ID(), "lease/"+string(during.UID)+"/") {
					caught = append(caught, ev)
				}
			}
			return caught
		}).WithTimeout(30*time.Second).WithPolling(500*time.Millisecond).ShouldNot(BeEmpty(), "the proposal the cluster committed after its return")
		// JetStream answers a re-send past its window from the record's
		// subject alone: wait until it has forgotten the ids.
		probe := jetStream()
		for _, ev := range caught {
			b, err := json.Marshal(ev)
			Expect(err).NotTo(HaveOccurred())
			Eventually(func() error {
				_, err := probe.Publish(ctx, sink.Subject(ev), b, jetstream.WithMsgID(ev.ID()))
				return err
			}).WithTimeout(30*time.Second).Should(MatchError(ContainSubstring("maximum messages per subject exceeded")), "%s", ev.ID())
		}

		By("the exporter catches up on its next retry, re-sending the caught records")
		drained(op)
		for _, l := range []*leasingv1alpha1.MacNodeLease{early, late} {
			Eventually(gone(l)).Should(BeTrue(), "a released lease goes once its last record is out")
		}

		By("reading the stream: each record once, every object's records numbered from 1 without a gap")
		events := readStream()
		j := expectWhole(deletions, 2)
		info, err = cluster.StreamInfo(ctx, stream)
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("stream: %d records, %d bytes, %d subjects\n", info.State.Msgs, info.State.Bytes, info.State.NumSubjects)
		for _, l := range []*leasingv1alpha1.MacNodeLease{early, late} {
			Expect(j.types["lease/"+string(l.UID)]).To(ContainElements("lease.created", "lease.bound", "lease.released", "lease.deleted"), "lease %s", l.Namespace)
		}
		Expect(j.types["lease/"+string(early.UID)]).To(ContainElement("lease.held"))
		Expect(j.types["lease/"+string(during.UID)]).To(ContainElements("lease.created", "lease.bound"))
		for _, name := range chassis {
			mn := &fleetv1alpha1.MacNode{}
			Expect(admin.Get(ctx, types.NamespacedName{Name: name}, mn)).To(Succeed())
			Expect(j.seqs["chassis/"+string(mn.UID)]).NotTo(BeEmpty(), "chassis %s", name)
		}

		By("billing from the stream with macrackctl: nothing to deduplicate, the leases' own timestamps")
		to := op.Clock.Now()
		var out, errOut strings.Builder
		code := cli.Main([]string{"billing", "report", "--nats", cluster.URL(), "-o", "json",
			"--from", t0.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--now", to.Format(time.RFC3339)}, &out, &errOut)
		Expect(code).To(BeZero(), errOut.String())
		var report cli.BillingReport
		Expect(json.Unmarshal([]byte(out.String()), &report)).To(Succeed())
		Expect(report.Records).To(Equal(len(events)))
		Expect(report.Duplicates).To(BeZero())
		billed := map[string]billing.Usage{}
		for _, u := range report.Usage {
			billed[u.Tenant] = u
		}
		for tenant, sp := range want {
			Expect(billed).To(HaveKey(tenant))
			Expect(billed[tenant].ChassisHours).To(BeNumerically("~", sp.hoursUntil(to), 1e-6), "tenant %s", tenant)
			Expect(billed[tenant].ChassisHours).To(BeNumerically(">", 0))
		}
		// The same sums from a stream that held every record twice, as a
		// consumer that deduplicates on the id reads it.
		doubled, err := billing.Report(append(events, events...), t0, to)
		Expect(err).NotTo(HaveOccurred())
		Expect(doubled).To(Equal(report.Usage))
		stopOperator(op)
	})
})

// jetStream is a client of the cluster, closed with the spec.
func jetStream() jetstream.JetStream {
	GinkgoHelper()
	nc, err := nats.Connect(cluster.URL())
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(nc.Close)
	js, err := jetstream.New(nc)
	Expect(err).NotTo(HaveOccurred())
	return js
}

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
