package reconcilers

import (
	"fmt"
	"strings"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var n atomic.Int64

func unique(p string) string { return fmt.Sprintf("%s-%d", p, n.Add(1)) }

func namespace() string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	Expect(admin.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

func lease(ns, name, class, d string) *leasingv1alpha1.MacNodeLease {
	return &leasingv1alpha1.MacNodeLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: d},
	}
}

func get(obj client.Object) client.Object {
	GinkgoHelper()
	Expect(admin.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	return obj
}

func phaseOf(l *leasingv1alpha1.MacNodeLease) func() leasingv1alpha1.MacNodeLeasePhase {
	return func() leasingv1alpha1.MacNodeLeasePhase {
		got := &leasingv1alpha1.MacNodeLease{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(l), got); err != nil {
			return "gone"
		}
		return got.Status.Phase
	}
}

func macNodePhase(name string) func() fleetv1alpha1.MacNodePhase {
	return func() fleetv1alpha1.MacNodePhase {
		mn := &fleetv1alpha1.MacNode{}
		if err := admin.Get(ctx, client.ObjectKey{Name: name}, mn); err != nil {
			return "gone"
		}
		return mn.Status.Phase
	}
}

var _ = Describe("With no admission at all", func() {
	BeforeEach(func() {
		vwc := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
		Expect(admin.List(ctx, vwc)).To(Succeed())
		Expect(vwc.Items).To(BeEmpty(), "this suite must run without webhooks")
		bindings := &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{}
		Expect(admin.List(ctx, bindings)).To(Succeed())
		Expect(bindings.Items).To(BeEmpty(), "this suite must run without VAP bindings")
	})

	It("the lease controller refuses to bind a 1h lease written straight to storage, and binds a 24h one", Label("proves:lease.floor"), func() {
		class := unique("m4")
		_, err := harness.CreateClass(ctx, admin, class, 2)
		Expect(err).NotTo(HaveOccurred())
		node, err := harness.CreateChassis(ctx, admin, class, harness.GoodFacts())
		Expect(err).NotTo(HaveOccurred())
		Eventually(macNodePhase(node)).Should(Equal(fleetv1alpha1.MacNodeReady))
		ns := namespace()

		illegal := lease(ns, "short", class, "1h")
		Expect(admin.Create(ctx, illegal)).To(Succeed(), "nothing at admission stops it here")
		Eventually(func() []metav1.Condition { return get(illegal).(*leasingv1alpha1.MacNodeLease).Status.Conditions }).Should(
			ContainElement(And(HaveField("Type", leasingv1alpha1.ConditionBound), HaveField("Reason", leasingv1alpha1.ReasonPolicyDenied),
				HaveField("Message", ContainSubstring("lease.floor: minimumDuration 1h is below the 24h floor")))))
		Consistently(phaseOf(illegal), "1s").Should(Equal(leasingv1alpha1.LeasePending))
		Expect(get(&fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: node}}).(*fleetv1alpha1.MacNode).Status.Binding).To(BeNil())

		legal := lease(ns, "day", class, "24h")
		Expect(admin.Create(ctx, legal)).To(Succeed())
		Eventually(phaseOf(legal)).Should(Equal(leasingv1alpha1.LeaseBound), "positive control")
	})

	It("the node controller never moves a SIP-off host to Ready, and moves a compliant one", Label("proves:quota.never-circumvent"), func() {
		class := unique("m4")
		_, err := harness.CreateClass(ctx, admin, class, 2)
		Expect(err).NotTo(HaveOccurred())
		bad := harness.GoodFacts()
		bad.SIPEnabled = ptr.To(false)
		bad.BootArgs = "hv_apple_isa_vm_quota=0xff"
		tampered, err := harness.CreateChassis(ctx, admin, class, bad)
		Expect(err).NotTo(HaveOccurred())
		good, err := harness.CreateChassis(ctx, admin, class, harness.GoodFacts())
		Expect(err).NotTo(HaveOccurred())

		Eventually(macNodePhase(good)).Should(Equal(fleetv1alpha1.MacNodeReady), "positive control")
		Eventually(macNodePhase(tampered)).Should(Equal(fleetv1alpha1.MacNodeEnrolled))
		Consistently(macNodePhase(tampered), "1s").Should(Equal(fleetv1alpha1.MacNodeEnrolled))
		mn := get(&fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: tampered}}).(*fleetv1alpha1.MacNode)
		Expect(mn.Status.Reported.BootArgs).To(Equal("hv_apple_isa_vm_quota=0xff"), "the failing facts are stored")
		Expect(mn.Status.Conditions).To(ContainElement(And(
			HaveField("Type", fleetv1alpha1.ConditionHardwareCompliant), HaveField("Status", metav1.ConditionFalse),
			HaveField("Message", ContainSubstring("quota.never-circumvent:")),
			HaveField("Message", ContainSubstring("System Integrity Protection")),
			HaveField("Message", ContainSubstring("hv_apple_isa_vm_quota")))))
	})

	It("a forced finalizer removal at +3h frees nothing: the binding holds the chassis until earliestReleaseAt", Label("proves:lease.release"), func() {
		class := unique("m4")
		_, err := harness.CreateClass(ctx, admin, class, 2)
		Expect(err).NotTo(HaveOccurred())
		node, err := harness.CreateChassis(ctx, admin, class, harness.GoodFacts())
		Expect(err).NotTo(HaveOccurred())
		Eventually(macNodePhase(node)).Should(Equal(fleetv1alpha1.MacNodeReady))
		first := lease(namespace(), "l", class, "24h")
		Expect(admin.Create(ctx, first)).To(Succeed())
		Eventually(phaseOf(first)).Should(Equal(leasingv1alpha1.LeaseBound))

		op.Step(mustDuration("3h"), first)
		Expect(admin.Delete(ctx, first)).To(Succeed())
		Eventually(phaseOf(first)).Should(Equal(leasingv1alpha1.LeaseHeld))
		forced := get(first).(*leasingv1alpha1.MacNodeLease)
		forced.Finalizers = nil
		Expect(admin.Update(ctx, forced)).To(Succeed(), "an administrator forces the finalizer off")
		Eventually(phaseOf(first)).Should(Equal(leasingv1alpha1.MacNodeLeasePhase("gone")))

		second := lease(namespace(), "l", class, "24h")
		Expect(admin.Create(ctx, second)).To(Succeed())
		Eventually(phaseOf(second)).Should(Equal(leasingv1alpha1.LeasePending))
		Consistently(phaseOf(second), "1s").Should(Equal(leasingv1alpha1.LeasePending))
		mn := get(&fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: node}}).(*fleetv1alpha1.MacNode)
		Expect(mn.Status.Binding).NotTo(BeNil())
		Expect(mn.Status.Binding.LeaseNamespace).To(Equal(first.Namespace))
		Expect(mn.Status.Conditions).To(ContainElement(HaveField("Message", ContainSubstring("the lease is gone"))))

		op.Step(mustDuration("22h"), mn)
		Eventually(phaseOf(second)).Should(Equal(leasingv1alpha1.LeaseBound), "after earliestReleaseAt the chassis goes to the next tenant")
		mn = get(mn).(*fleetv1alpha1.MacNode)
		Expect(mn.Status.History).To(ContainElement(HaveField("LeaseNamespace", first.Namespace)))
		Expect(strings.ToLower(mn.Spec.Serial)).To(Equal(mn.Name))
	})
})
