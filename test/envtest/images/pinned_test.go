package images

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// wipeMethods are the methods an agent may record.
var wipeMethods = []string{"apfs-clone-unlink", "reflink-unlink", "unlink"}

// goodEvidence matches the evidence of the wipe of instance uid (named
// name) of lease, in namespace ns, that ran.
func goodEvidence(ns, name, lease string, uid types.UID) OmegaMatcher {
	return And(
		HaveField("Namespace", ns), HaveField("Name", name), HaveField("UID", uid), HaveField("LeaseName", lease),
		HaveField("Files", ContainElements("disk.img", "aux.img")),
		HaveField("Bytes", BeNumerically(">", 0)),
		HaveField("Method", BeElementOf(wipeMethods)),
		HaveField("WipedAt", Not(BeZero())))
}

func reportedWipes(node string) []fleetv1alpha1.WipeEvidence {
	GinkgoHelper()
	mn := macNode(node)
	if mn.Status.Reported == nil {
		return nil
	}
	return mn.Status.Reported.Wipes
}

// Last: it moves the operator's fake clock a day on, to release its lease.
var _ = Describe("A golden pinned by a live instance, and the evidence of a wipe", Ordered, SpecPriority(-1), func() {
	const class = "img-pin"
	var (
		a              *harness.Agent
		tenant         *harness.Tenant
		lease          *leasingv1alpha1.MacNodeLease
		estimate       int64
		pinA, pinB     *computev1alpha1.MacOSInstance
		uidA, uidB     types.UID
		leaseName      = "pinned"
		budget         int64
		wipeOfA        fleetv1alpha1.WipeEvidence
		instanceWipeOK bool
	)

	BeforeAll(func() {
		estimate = lruImages()
		a = startChassis(class)
		tenant = newTenant("pinner")
		lease = bookLease(tenant, leaseName, class)
		Expect(lease.Status.NodeName).To(Equal(a.Node))
	})

	It("does not pull another class's pre-pull", func() {
		Eventually(func() *fleetv1alpha1.ImageCacheReport { return imageCache(a.Node) }).ShouldNot(BeNil(), "the agent reports its cache")
		Consistently(reported(a.Node, "img-lru-a"), "2s").Should(BeNil(), "img-lru-a is pre-pulled onto %s only", evictClass)
	})

	It("keeps a golden a live instance uses, and makes the pull that needs its room wait", func() {
		pinA = instance(tenant.Namespace, "pin-a", leaseName, "img-lru-a")
		Expect(tenant.Client.Create(ctx, pinA)).To(Succeed())
		Eventually(phaseOf(pinA), "60s").Should(Equal(computev1alpha1.VMRunning))
		var used int64
		Eventually(func() int64 {
			if ic := imageCache(a.Node); ic != nil {
				used = ic.Used.Value()
			}
			return used
		}).Should(BeNumerically(">", 0))
		budget = estimate + used/2
		setBudget(class, a.Node, budget)

		pinB = instance(tenant.Namespace, "pin-b", leaseName, "img-lru-b")
		Expect(tenant.Client.Create(ctx, pinB)).To(Succeed())
		Eventually(reported(a.Node, "img-lru-b"), "30s").Should(And(HaveField("Phase", fleetv1alpha1.ImageWaiting),
			HaveField("Message", And(ContainSubstring("no room in the golden cache"), ContainSubstring("pinned: img-lru-a"),
				ContainSubstring("a golden in use or booked is never evicted")))))
		Eventually(runtimeOf(pinB)).Should(And(HaveField("Phase", computev1alpha1.VMPulling),
			HaveField("Message", ContainSubstring("the pull of golden img-lru-b waits for room in the image cache"))))
		Consistently(func(g Gomega) {
			g.Expect(reported(a.Node, "img-lru-a")()).To(HaveField("Phase", fleetv1alpha1.ImageReady))
			g.Expect(phaseOf(pinA)()).To(Equal(computev1alpha1.VMRunning))
			g.Expect(phaseOf(pinB)()).To(Equal(computev1alpha1.VMPulling))
		}, "3s", "200ms").Should(Succeed(), "the golden of a live instance was evicted")
		Expect(events(metav1.NamespaceDefault, "MacNode", a.Node, fleetv1alpha1.ReasonImageEvicted)()).To(BeEmpty())
	})

	It("records the wipe of an instance that ran, then evicts its golden for the pull that waited", func() {
		rw := watchRuntimes(tenant.Namespace)
		got := &computev1alpha1.MacOSInstance{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(pinA), got)).To(Succeed())
		uidA = got.UID
		Expect(a.DiskDir(string(uidA))).To(BeADirectory(), "positive control: the disk exists while the VM runs")
		Expect(tenant.Client.Delete(ctx, got)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(pinA), got)) }, "30s").Should(BeTrue())
		Expect(a.DiskDir(string(uidA))).NotTo(BeADirectory())

		// Before it disappeared, the instance carried the evidence.
		var fromInstance *fleetv1alpha1.WipeEvidence
		for _, rt := range rw.of(pinA.Name) {
			if rt.Wipe != nil {
				fromInstance = rt.Wipe.DeepCopy()
			}
		}
		Expect(fromInstance).NotTo(BeNil(), "no status.runtime.wipe was seen before the instance went")
		Expect(*fromInstance).To(goodEvidence(tenant.Namespace, pinA.Name, leaseName, uidA))
		instanceWipeOK = true
		wipeOfA = *fromInstance

		Eventually(func() []fleetv1alpha1.WipeEvidence { return reportedWipes(a.Node) }).Should(ContainElement(
			goodEvidence(tenant.Namespace, pinA.Name, leaseName, uidA)), "the MacNode's report keeps the evidence")
		Eventually(events(tenant.Namespace, "MacNodeLease", leaseName, leasingv1alpha1.ReasonDiskWiped)).Should(ContainElement(
			HaveField("Note", And(ContainSubstring(pinA.Name), ContainSubstring(string(uidA)), ContainSubstring("disk.img"),
				ContainSubstring("aux.img"), ContainSubstring(wipeOfA.Method)))), "the tenant is told on the lease")

		// Its golden is no longer in use: the waiting pull evicts it.
		Eventually(reported(a.Node, "img-lru-b"), "30s").Should(HaveField("Phase", fleetv1alpha1.ImageReady))
		Eventually(phaseOf(pinB), "60s").Should(Equal(computev1alpha1.VMRunning))
		Eventually(events(metav1.NamespaceDefault, "MacNode", a.Node, fleetv1alpha1.ReasonImageEvicted)).Should(ContainElement(
			HaveField("Note", ContainSubstring("img-lru-a"))))
		Expect(imageCache(a.Node).Used.Value()).To(BeNumerically("<=", budget))
	})

	It("keeps the wipes in the chassis' history once the lease is released", func() {
		Expect(instanceWipeOK).To(BeTrue(), "the previous spec did not record a wipe")
		got := &computev1alpha1.MacOSInstance{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(pinB), got)).To(Succeed())
		uidB = got.UID

		Expect(tenant.Client.Delete(ctx, lease)).To(Succeed())
		held := &leasingv1alpha1.MacNodeLease{}
		Eventually(func() leasingv1alpha1.MacNodeLeasePhase {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(lease), held)).To(Succeed())
			return held.Status.Phase
		}).Should(Equal(leasingv1alpha1.LeaseHeld), "deleted before earliestReleaseAt")
		Expect(phaseOf(pinB)()).To(Equal(computev1alpha1.VMRunning), "a held lease keeps its instances")

		op.Step(25*time.Hour, held)
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(lease), &leasingv1alpha1.MacNodeLease{}))
		}, "60s").Should(BeTrue(), "the lease is released once its instances are wiped")
		Expect(apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(pinB), got))).To(BeTrue(),
			"the release deleted the lease's last instance")

		mn := macNode(a.Node)
		Expect(mn.Status.Binding).To(BeNil())
		Expect(mn.Status.History).NotTo(BeEmpty())
		last := mn.Status.History[len(mn.Status.History)-1]
		Expect(last.LeaseNamespace).To(Equal(tenant.Namespace))
		Expect(last.LeaseName).To(Equal(leaseName))
		Expect(last.LeaseUID).To(Equal(lease.UID))
		Expect(last.Wipes).To(ContainElement(goodEvidence(tenant.Namespace, pinA.Name, leaseName, uidA)),
			"the history lost the wipe of %s", pinA.Name)
		Expect(last.Wipes).To(ContainElement(goodEvidence(tenant.Namespace, pinB.Name, leaseName, uidB)),
			"the history lost the wipe of %s, the lease's last instance, wiped by the release", pinB.Name)
		Expect(last.Wipes).To(HaveLen(2))
	})
})
