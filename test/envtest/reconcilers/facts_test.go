package reconcilers

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// readyReason is the MacNode's Ready condition's reason.
func readyReason(name string) func() string {
	return func() string {
		mn := &fleetv1alpha1.MacNode{}
		if err := admin.Get(ctx, client.ObjectKey{Name: name}, mn); err != nil {
			return "gone"
		}
		if c := meta.FindStatusCondition(mn.Status.Conditions, fleetv1alpha1.ConditionReady); c != nil {
			return c.Reason
		}
		return ""
	}
}

// beforeFacts is what an agent's other loops write into status.reported
// before its first facts report: the quota and the inventory.
func beforeFacts() *fleetv1alpha1.ReportedFacts {
	return &fleetv1alpha1.ReportedFacts{Quota: &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK},
		Inventory: &fleetv1alpha1.HostInventory{ObservedAt: metav1.Now()}}
}

var _ = Describe("A chassis at enrolment", func() {
	It("is not judged before its agent's facts report: no denial, not Ready; then Ready, or denied by name", func() {
		class := unique("m4")
		_, err := harness.CreateClass(ctx, admin, class, 2)
		Expect(err).NotTo(HaveOccurred())
		good, err := harness.CreateChassis(ctx, admin, class, beforeFacts())
		Expect(err).NotTo(HaveOccurred())
		bad, err := harness.CreateChassis(ctx, admin, class, beforeFacts())
		Expect(err).NotTo(HaveOccurred())

		for _, name := range []string{good, bad} {
			Eventually(readyReason(name)).Should(Equal(fleetv1alpha1.ReasonAwaitingFacts), "it waits for facts")
			Expect(macNodePhase(name)()).To(Equal(fleetv1alpha1.MacNodePending))
		}
		Consistently(func() []string { return append(sink.denialRules(good), sink.denialRules(bad)...) }, "1s").Should(BeEmpty(),
			"a chassis whose facts are not in yet is denied nothing")

		// The agent's facts report, as the agent writes it.
		Expect(host.ReportFacts(ctx, admin, good, harness.GoodFacts())).To(Succeed())
		Eventually(macNodePhase(good)).Should(Equal(fleetv1alpha1.MacNodeReady))
		Expect(sink.denialRules(good)).To(BeEmpty())

		// The positive control: a complete report that fails both rules.
		failing := harness.GoodFacts()
		failing.NetworkGbps, failing.SIPEnabled = ptr.To(int32(1)), ptr.To(false)
		Expect(host.ReportFacts(ctx, admin, bad, failing)).To(Succeed())
		Eventually(func() []string { return sink.denialRules(bad) }).Should(ContainElements("node.commercial", "quota.never-circumvent"))
		// The denial is recorded as the pass decides, before its status
		// write: wait for the phase, then see that it stays.
		Eventually(macNodePhase(bad)).Should(Equal(fleetv1alpha1.MacNodeEnrolled))
		Consistently(macNodePhase(bad), "1s").Should(Equal(fleetv1alpha1.MacNodeEnrolled))
	})
})
