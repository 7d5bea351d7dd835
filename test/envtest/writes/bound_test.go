package writes

import (
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// A bound lease's reconcile writes nothing, whatever duration the schema
// admits (issue 31): a fractional minimumDuration once made extend rewrite
// the binding on every pass, and the lease's status patch be refused.
var _ = Describe("A bound lease of a fractional duration, reconciled again", Ordered, func() {
	const boundClass = "m4-writes-bound"
	var (
		op     *harness.Operator
		tenant *harness.Tenant
	)

	BeforeAll(func() {
		var err error
		op, err = env.StartOperator(harness.OperatorOptions{
			Start: time.Now(), Webhooks: true,
			Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName("operator"),
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(op.Stop)
		_, err = harness.CreateClass(ctx, admin, boundClass, 2)
		Expect(err).NotTo(HaveOccurred())
		serial := harness.NewSerial()
		_, err = enroll.Enroll(ctx, admin, env.Config, enroll.Options{Serial: serial, Class: boundClass,
			AgentsNamespace: harness.AgentsNamespace, TokenTTL: time.Hour})
		Expect(err).NotTo(HaveOccurred())
		node := enroll.NodeName(serial)
		agentClient, err := env.ClientAsServiceAccount(harness.AgentsNamespace, host.ServiceAccountName(node))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error { _, err := host.Register(ctx, agentClient, node, 0); return err }).Should(Succeed())
		Eventually(func() error { return host.ReportFacts(ctx, agentClient, node, harness.GoodFacts()) }).Should(Succeed())
		Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(node).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeReady))
		tenant, err = env.NewTenant(ctx, "bound-tenant")
		Expect(err).NotTo(HaveOccurred())
	})

	// operatorWrites steps the operator's clock a second at a time, sending
	// the lease to its reconciler each time, and returns the operator's
	// writes meanwhile.
	operatorWrites := func(l *leasingv1alpha1.MacNodeLease, passes int) []write {
		GinkgoHelper()
		st, err := os.Stat(auditLog)
		Expect(err).NotTo(HaveOccurred())
		from := quiesce(st.Size(), time.Second)
		for range passes {
			op.Step(time.Second, l)
		}
		to := quiesce(from, time.Second)
		ws, _ := readAuditTo(from, to)
		var out []write
		for _, w := range ws {
			if w.writer == "operator" && !periodic(w) {
				out = append(out, w)
			}
		}
		return out
	}

	for _, minimum := range []string{"24h", "24h0.5s", "86400.25s", "1440m0.001s", "24h0m0.000000001s"} {
		It("a bound "+minimum+" lease, reconciled 5 times, is written 0 times; lengthened, it is extended", func() {
			l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{GenerateName: "bound-", Namespace: tenant.Namespace},
				Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: boundClass, MinimumDuration: minimum}}
			Expect(tenant.Client.Create(ctx, l)).To(Succeed())
			Eventually(func() leasingv1alpha1.MacNodeLeasePhase { return getLease(l).Status.Phase }).Should(Equal(leasingv1alpha1.LeaseBound))

			ws := operatorWrites(l, 5)
			rows := make([]string, len(ws))
			for i, w := range ws {
				rows[i] = w.row()
			}
			Expect(rows).To(BeEmpty(), "a bound %s lease's reconciles write nothing", minimum)

			By("positive control: lengthening it to 25h0.5s is one extension, then quiet again")
			Expect(tenant.Client.Patch(ctx, getLease(l), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"minimumDuration":"25h0.5s"}}`)))).To(Succeed())
			Eventually(func() time.Duration {
				got := getLease(l)
				return got.Status.EarliestReleaseAt.Sub(got.Status.BoundAt.Time)
			}).Should(Equal(25*time.Hour + time.Second))
			ws = operatorWrites(l, 5)
			rows = make([]string, len(ws))
			for i, w := range ws {
				rows[i] = w.row()
			}
			Expect(rows).To(BeEmpty(), "a lease extended to 25h0.5s, reconciled again, writes nothing")

			Expect(tenant.Client.Delete(ctx, getLease(l))).To(Succeed())
			op.Step(26*time.Hour, l)
			Eventually(func() bool {
				got := &leasingv1alpha1.MacNodeLease{}
				return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(l), got))
			}).Should(BeTrue(), "the lease is released and goes")
		})
	}
})
