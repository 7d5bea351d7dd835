package images

import (
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/images"
	"github.com/boualleiguie/macrack-operator/internal/audit/journal"
	"github.com/boualleiguie/macrack-operator/internal/golden"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

func leaseCondition(l *leasingv1alpha1.MacNodeLease, typ string) func() *metav1.Condition {
	return func() *metav1.Condition {
		got := &leasingv1alpha1.MacNodeLease{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), got)).To(Succeed())
		return meta.FindStatusCondition(got.Status.Conditions, typ)
	}
}

// setBudget sets the class's imageCacheBudget and waits until the agent of
// node reports it.
func setBudget(class, node string, bytes int64) {
	GinkgoHelper()
	c := &fleetv1alpha1.MacNodeClass{}
	Expect(admin.Get(ctx, client.ObjectKey{Name: class}, c)).To(Succeed())
	base := c.DeepCopy()
	c.Spec.ImageCacheBudget = resource.NewQuantity(bytes, resource.BinarySI)
	Expect(admin.Patch(ctx, c, client.MergeFrom(base))).To(Succeed())
	Eventually(func() int64 {
		if ic := imageCache(node); ic != nil {
			return ic.Budget.Value()
		}
		return 0
	}).Should(Equal(bytes), "the agent never read the class's budget")
}

// The two goldens the eviction containers share: img-lru-a, pre-pulled onto
// the chassis of evictClass, and img-lru-b, pre-pulled nowhere. Both are the
// same size, so a pull of either needs lruEstimate bytes of room.
const evictClass = "img-evict"

var (
	lruOnce     sync.Once
	lruEstimate int64
)

func lruImages() int64 {
	GinkgoHelper()
	lruOnce.Do(func() {
		refA := pushAndResolve("img-lru-a", func(s *fleetv1alpha1.MacOSImageSpec) {
			s.PrePull = &fleetv1alpha1.PrePull{NodeClassNames: []string{evictClass}}
		})
		refB := pushAndResolve("img-lru-b", nil)
		var est [2]int64
		for i, ref := range []string{refA, refB} {
			g, err := harness.ResolveGolden(ctx, ref, golden.RemoteOptions{PlainHTTP: true})
			Expect(err).NotTo(HaveOccurred())
			est[i] = images.EstimatedSize(g)
		}
		Expect(est[0]).To(Equal(est[1]))
		lruEstimate = est[0]
	})
	Expect(lruEstimate).To(BeNumerically(">", 0), "the eviction goldens failed to push in an earlier container")
	return lruEstimate
}

var _ = Describe("Pre-pulling the images a lease books", Ordered, func() {
	const class = "img-book"

	It("pulls a lease's images onto its chassis at bind, before any instance, and says so in ImagesReady", func() {
		pushAndResolve("img-booked", nil)
		chassis := map[string]*harness.Agent{}
		for range 2 {
			a := startChassis(class)
			chassis[a.Node] = a
		}
		t := newTenant("booker")
		var mu sync.Mutex
		var seen []metav1.Condition
		w, err := env.WatchClient().Watch(ctx, &leasingv1alpha1.MacNodeLeaseList{}, client.InNamespace(t.Namespace))
		Expect(err).NotTo(HaveOccurred())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ev := range w.ResultChan() {
				if l, ok := ev.Object.(*leasingv1alpha1.MacNodeLease); ok {
					if c := meta.FindStatusCondition(l.Status.Conditions, leasingv1alpha1.ConditionImagesReady); c != nil {
						mu.Lock()
						seen = append(seen, *c)
						mu.Unlock()
					}
				}
			}
		}()
		DeferCleanup(func() { w.Stop(); <-done })

		l := bookLease(t, "booked", class, "img-booked")
		bound := chassis[l.Status.NodeName]
		Expect(bound).NotTo(BeNil(), "bound to %s, not a chassis of %s", l.Status.NodeName, class)
		Expect(macNode(bound.Node).Status.Binding.Images).To(Equal([]string{"img-booked"}))

		Eventually(leaseCondition(l, leasingv1alpha1.ConditionImagesReady), "30s").Should(And(
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", leasingv1alpha1.ReasonImagesPulled),
			HaveField("Message", ContainSubstring(bound.Serial))))
		list := &computev1alpha1.MacOSInstanceList{}
		Expect(admin.List(ctx, list, client.InNamespace(t.Namespace))).To(Succeed())
		Expect(list.Items).To(BeEmpty(), "ImagesReady came from the booking, not from an instance")
		mu.Lock()
		first := seen[0]
		mu.Unlock()
		Expect(first.Status).To(Equal(metav1.ConditionFalse), "ImagesReady was True before the chassis reported the pull: %v", seen)

		Expect(reported(bound.Node, "img-booked")()).To(And(HaveField("Phase", fleetv1alpha1.ImageReady),
			HaveField("Digest", getImage("img-booked").Status.Resolved.Digest)))
		Eventually(replicatedOn("img-booked")).Should(ContainElement(bound.Serial))

		// Negative control: the free chassis of the same class pulls nothing.
		for node, a := range chassis {
			if node == bound.Node {
				continue
			}
			Consistently(reported(node, "img-booked"), "2s").Should(BeNil(), "a chassis no lease books pulled the image")
			Expect(replicatedOn("img-booked")()).To(ConsistOf(bound.Serial), "and %s is not a replica", a.Serial)
		}
	})
})

var _ = Describe("A class's pre-pull, and eviction within the class's cache budget", Ordered, func() {
	var (
		a        *harness.Agent
		estimate int64
		budget   int64
	)

	BeforeAll(func() {
		estimate = lruImages()
		a = startChassis(evictClass)
	})

	It("pulls a golden pre-pulled onto its class without any lease, and only that one", func() {
		Eventually(reported(a.Node, "img-lru-a"), "30s").Should(HaveField("Phase", fleetv1alpha1.ImageReady))
		Expect(macNode(a.Node).Status.Binding).To(BeNil(), "no lease holds the chassis")
		Eventually(replicatedOn("img-lru-a")).Should(ContainElement(a.Serial))
		// Negative control: the golden pre-pulled nowhere stays in the registry.
		Consistently(reported(a.Node, "img-lru-b"), "2s").Should(BeNil())
		Expect(replicatedOn("img-lru-b")()).NotTo(ContainElement(a.Serial))
	})

	It("evicts the least recently used golden, and no booked one, to make room for a booked golden", func() {
		var used int64
		Eventually(func() int64 {
			if ic := imageCache(a.Node); ic != nil {
				used = ic.Used.Value()
			}
			return used
		}).Should(BeNumerically(">", 0))
		// Room for one pull (its estimate), not for a second golden beside
		// a first: img-lru-a must go for img-lru-b to come.
		budget = estimate + used/2
		GinkgoWriter.Printf("a sim golden allocates %d bytes; a pull needs room for %d; budget %d\n", used, estimate, budget)
		setBudget(evictClass, a.Node, budget)

		t := newTenant("evict")
		l := bookLease(t, "lru", evictClass, "img-lru-b")
		Expect(l.Status.NodeName).To(Equal(a.Node))
		Eventually(reported(a.Node, "img-lru-b"), "30s").Should(HaveField("Phase", fleetv1alpha1.ImageReady))
		Eventually(leaseCondition(l, leasingv1alpha1.ConditionImagesReady)).Should(HaveField("Status", metav1.ConditionTrue))

		Eventually(events(metav1.NamespaceDefault, "MacNode", a.Node, fleetv1alpha1.ReasonImageEvicted)).Should(ContainElement(
			HaveField("Note", And(ContainSubstring("img-lru-a"), ContainSubstring("img-lru-b")))),
			"the agent tells of the eviction on its MacNode")
		Eventually(replicatedOn("img-lru-a")).ShouldNot(ContainElement(a.Serial))
		Eventually(events(metav1.NamespaceDefault, "MacOSImage", "img-lru-a", fleetv1alpha1.ReasonImageEvicted)).Should(ContainElement(
			HaveField("Note", ContainSubstring(a.Serial))), "the operator tells of the lost replica on the MacOSImage")
		Eventually(replicatedOn("img-lru-b")).Should(ContainElement(a.Serial))
		By("the chassis' journal: a copy of each golden replicated, the evicted one's eviction")
		digestOf := func(image string) string { return getImage(image).Status.Resolved.Digest }
		copyRecord := func(typ, image string) types.GomegaMatcher {
			return And(HaveField("Type", typ), HaveField("Attributes", And(HaveKeyWithValue("image", image),
				HaveKeyWithValue("digest", digestOf(image)), HaveKeyWithValue("serial", a.Serial))))
		}
		Eventually(func() []fleetv1alpha1.AuditRecord { return macNode(a.Node).Status.Audit.Records }).Should(And(
			ContainElement(copyRecord(journal.RecordReplicated, "img-lru-a")),
			ContainElement(copyRecord(journal.RecordEvicted, "img-lru-a")),
			ContainElement(copyRecord(journal.RecordReplicated, "img-lru-b"))))
		Expect(macNode(a.Node).Status.Audit.Records).NotTo(ContainElement(copyRecord(journal.RecordEvicted, "img-lru-b")),
			"negative control: the booked golden was never evicted")

		// The class still pre-pulls img-lru-a, but the booked golden is
		// never evicted for it: it waits.
		Eventually(reported(a.Node, "img-lru-a")).Should(And(HaveField("Phase", fleetv1alpha1.ImageWaiting),
			HaveField("Message", And(ContainSubstring("no room in the golden cache"), ContainSubstring("pinned: img-lru-b")))))
		Consistently(reported(a.Node, "img-lru-b"), "2s").Should(HaveField("Phase", fleetv1alpha1.ImageReady))
		Expect(imageCache(a.Node).Used.Value()).To(BeNumerically("<=", budget))
	})
})
