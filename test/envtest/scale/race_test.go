package scale

import (
	"fmt"
	"sort"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

const (
	chassisCount = 900
	tenantCount  = 1000
	releaseCount = 100
	class        = "m4-scale"
	leaseName    = "build"
)

var _ = Describe("The binding race, at scale", Ordered, func() {
	var (
		tenants []*tenant
		rec     *recorder
		// pending are the leases left Pending by the first race; released
		// the Bound ones their tenants delete, with their chassis.
		pending, released map[types.UID]string
		releasedChassis   map[string]bool
	)

	// timed reports how long a step took, and the CPU this process (the
	// operator, its webhooks and the suite) and the control plane used so far.
	timed := func(what string, since time.Time) {
		AddReportEntry(what, fmt.Sprintf("%s (CPU so far: %s)", time.Since(since).Round(10*time.Millisecond), cpuTimes()), ReportEntryVisibilityAlways)
	}

	BeforeAll(func(sctx SpecContext) {
		t0 := time.Now()
		var err error
		// The watch starts before the first chassis and the first lease.
		rec, err = startRecorder(class)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { rec.stop() })
		_, err = harness.CreateClass(ctx, admin, class, 2)
		Expect(err).NotTo(HaveOccurred())
		Expect(createChassis(class, chassisCount)).To(Succeed())
		// Read from the watch: polling a list of 900 MacNodes would cost the
		// API server more than anything it measures.
		Eventually(sctx, rec.ready, "6m", "250ms").Should(Equal(chassisCount))
		timed(fmt.Sprintf("%d chassis created and Ready", chassisCount), t0)
		nodes, err := macNodes(class)
		Expect(err).NotTo(HaveOccurred())
		Expect(nodes).To(HaveLen(chassisCount))
		for _, n := range nodes {
			Expect(n.Status.Phase).To(Equal(fleetv1alpha1.MacNodeReady), "chassis %s", n.Name)
		}

		t0 = time.Now()
		tenants, err = newTenants(tenantCount)
		Expect(err).NotTo(HaveOccurred())
		timed(fmt.Sprintf("%d tenants (namespace, RoleBinding, RBAC in force)", tenantCount), t0)
	})

	It("binds exactly 900 of 1,000 concurrent leases, one per chassis, and leaves 100 Pending with NoCapacity", func(sctx SpecContext) {
		t0 := time.Now()
		Expect(parallel(len(tenants), 64, func(i int) error {
			t := tenants[i]
			return t.client.Create(ctx, newLease(t.namespace, leaseName, class))
		})).To(Succeed())
		timed(fmt.Sprintf("%d leases created through the webhooks (64 at a time)", tenantCount), t0)

		want := tally{Bound: chassisCount, PendingNoCapacity: tenantCount - chassisCount}
		Eventually(sctx, rec.tally, "8m").Should(Equal(want))
		timed("from the first create to 900 Bound and 100 Pending (NoCapacity), as the watch saw", t0)
		Consistently(rec.tally, "1s").Should(Equal(want), "a lease bound, or a Bound one came loose, after the race settled")
		// The node controller derives Leased from each binding, after the
		// claim: the phase's one writer.
		Eventually(sctx, func(g Gomega) {
			nodes, err := macNodes(class)
			g.Expect(err).NotTo(HaveOccurred())
			for _, n := range nodes {
				g.Expect(n.Status.Phase).To(Equal(fleetv1alpha1.MacNodeLeased), "chassis %s", n.Name)
			}
		}, "1m").Should(Succeed())

		// The API server's own state, read once it settled.
		ls, err := leases(class)
		Expect(err).NotTo(HaveOccurred())
		Expect(ls).To(HaveLen(tenantCount))
		nodes, err := macNodes(class)
		Expect(err).NotTo(HaveOccurred())
		Expect(nodes).To(HaveLen(chassisCount))

		byUID := map[types.UID]*leasingv1alpha1.MacNodeLease{}
		for i := range ls {
			byUID[ls[i].UID] = &ls[i]
		}
		// Every chassis is bound, each to a different lease, which is Bound
		// to that chassis.
		holder := map[types.UID]string{}
		for _, n := range nodes {
			b := n.Status.Binding
			Expect(b).NotTo(BeNil(), "chassis %s is unbound while leases wait", n.Name)
			Expect(holder).NotTo(HaveKey(b.LeaseUID), "lease %s/%s holds chassis %s and %s", b.LeaseNamespace, b.LeaseName, holder[b.LeaseUID], n.Name)
			holder[b.LeaseUID] = n.Name
			l := byUID[b.LeaseUID]
			Expect(l).NotTo(BeNil(), "chassis %s's binding names lease %s/%s (%s), which does not exist", n.Name, b.LeaseNamespace, b.LeaseName, b.LeaseUID)
			Expect([]string{l.Namespace, l.Name}).To(Equal([]string{b.LeaseNamespace, b.LeaseName}))
			Expect(l.Status.Phase).To(Equal(leasingv1alpha1.LeaseBound))
			Expect(l.Status.NodeName).To(Equal(n.Name))
			Expect(l.Status.Serial).To(Equal(n.Spec.Serial))
		}
		Expect(holder).To(HaveLen(chassisCount))
		// No two leases name the same serial; the unbound ones name none.
		serials := map[string]string{}
		pending = map[types.UID]string{}
		for _, l := range ls {
			switch l.Status.Phase {
			case leasingv1alpha1.LeaseBound:
				Expect(holder).To(HaveKey(l.UID), "lease %s/%s is Bound, and no chassis' binding names it", l.Namespace, l.Name)
				Expect(serials).NotTo(HaveKey(l.Status.Serial), "leases %s and %s/%s name serial %s", serials[l.Status.Serial], l.Namespace, l.Name, l.Status.Serial)
				serials[l.Status.Serial] = l.Namespace + "/" + l.Name
			case leasingv1alpha1.LeasePending:
				Expect(boundReason(&l)).To(Equal(leasingv1alpha1.ReasonNoCapacity), "lease %s/%s", l.Namespace, l.Name)
				Expect(l.Status.NodeName).To(BeEmpty())
				Expect(l.Status.Serial).To(BeEmpty())
				Expect(holder).NotTo(HaveKey(l.UID))
				pending[l.UID] = l.Namespace
			default:
				Fail(fmt.Sprintf("lease %s/%s is %q", l.Namespace, l.Name, l.Status.Phase))
			}
		}
		Expect(serials).To(HaveLen(chassisCount))
		Expect(pending).To(HaveLen(tenantCount - chassisCount))

		// The watch, over every intermediate state: each Bound lease became
		// Bound once, on one chassis; no chassis' binding moved from one
		// lease to another; no lease was named by two bindings.
		s := rec.snapshot()
		Expect(s.violations).To(BeEmpty())
		Expect(s.leases).To(HaveLen(tenantCount), "positive control: the watch saw every lease")
		for uid, l := range s.leases {
			if _, ok := holder[uid]; ok {
				Expect(l.boundEntries).To(Equal(1), "lease %s/%s", l.namespace, l.name)
				Expect(l.nodeNames).To(Equal([]string{holder[uid]}), "lease %s/%s", l.namespace, l.name)
			} else {
				Expect(l.boundEntries).To(BeZero(), "lease %s/%s", l.namespace, l.name)
				Expect(l.nodeNames).To(BeEmpty(), "lease %s/%s", l.namespace, l.name)
			}
		}
		for name, n := range s.nodes {
			Expect(n.leases).To(HaveLen(1), "chassis %s's binding named %v", name, n.leases)
		}
		AddReportEntry("watch", fmt.Sprintf("%d events, %d resumes", s.events, s.resumed), ReportEntryVisibilityAlways)
	})

	It("releases 100 Bound leases, and binds each of the 100 Pending ones exactly once", func(sctx SpecContext) {
		ls, err := leases(class)
		Expect(err).NotTo(HaveOccurred())
		var bound []leasingv1alpha1.MacNodeLease
		for _, l := range ls {
			if l.Status.Phase == leasingv1alpha1.LeaseBound {
				bound = append(bound, l)
			}
		}
		sort.Slice(bound, func(i, j int) bool { return bound[i].Namespace < bound[j].Namespace })
		bound = bound[:releaseCount]
		byNamespace := map[string]*tenant{}
		for _, t := range tenants {
			byNamespace[t.namespace] = t
		}
		released, releasedChassis = map[types.UID]string{}, map[string]bool{}
		for _, l := range bound {
			released[l.UID] = l.Namespace
			releasedChassis[l.Status.NodeName] = true
		}

		// The tenants delete them a day early: Held, the chassis kept.
		t0 := time.Now()
		Expect(parallel(len(bound), 64, func(i int) error {
			l := &bound[i]
			return byNamespace[l.Namespace].client.Delete(ctx, l)
		})).To(Succeed())
		Eventually(sctx, rec.tally, "2m").Should(Equal(tally{Bound: chassisCount - releaseCount, Held: releaseCount, PendingNoCapacity: tenantCount - chassisCount}))
		Consistently(rec.tally, "1s").Should(HaveField("PendingNoCapacity", tenantCount-chassisCount), "a Held lease's chassis went to a Pending lease")
		timed(fmt.Sprintf("%d deletes to %d Held", releaseCount, releaseCount), t0)

		// Past their earliestReleaseAt (bound at the fake clock's start, for
		// 24h), the leases' ticks release them.
		t0 = time.Now()
		objs := make([]client.Object, len(bound))
		for i := range bound {
			objs[i] = &bound[i]
		}
		op.Step(25*time.Hour, objs...)
		want := tally{Bound: chassisCount, Gone: releaseCount}
		Eventually(sctx, rec.tally, "4m").Should(Equal(want))
		timed("from the 25h tick to 900 Bound, 0 Pending and the 100 gone, as the watch saw", t0)
		Consistently(rec.tally, "1s").Should(Equal(want))

		// The API server's state.
		for _, l := range bound {
			err := admin.Get(ctx, client.ObjectKeyFromObject(&l), &leasingv1alpha1.MacNodeLease{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "lease %s/%s: %v", l.Namespace, l.Name, err)
		}
		ls, err = leases(class)
		Expect(err).NotTo(HaveOccurred())
		Expect(ls).To(HaveLen(tenantCount - releaseCount))
		nodes, err := macNodes(class)
		Expect(err).NotTo(HaveOccurred())
		holder := map[types.UID]string{}
		for _, n := range nodes {
			b := n.Status.Binding
			Expect(b).NotTo(BeNil(), "chassis %s is unbound", n.Name)
			Expect(holder).NotTo(HaveKey(b.LeaseUID), "lease %s/%s holds chassis %s and %s", b.LeaseNamespace, b.LeaseName, holder[b.LeaseUID], n.Name)
			holder[b.LeaseUID] = n.Name
			if releasedChassis[n.Name] {
				Expect(pending).To(HaveKey(b.LeaseUID), "released chassis %s went to lease %s/%s, which was not Pending", n.Name, b.LeaseNamespace, b.LeaseName)
				Expect(n.Status.History).To(HaveLen(1), "chassis %s", n.Name)
				Expect(released).To(HaveKey(n.Status.History[0].LeaseUID), "chassis %s's history", n.Name)
			} else {
				Expect(pending).NotTo(HaveKey(b.LeaseUID), "chassis %s, never released, went to a Pending lease", n.Name)
				Expect(n.Status.History).To(BeEmpty(), "chassis %s", n.Name)
			}
		}
		serials := map[string]string{}
		for _, l := range ls {
			Expect(l.Status.Phase).To(Equal(leasingv1alpha1.LeaseBound), "lease %s/%s", l.Namespace, l.Name)
			Expect(holder[l.UID]).To(Equal(l.Status.NodeName), "lease %s/%s", l.Namespace, l.Name)
			Expect(serials).NotTo(HaveKey(l.Status.Serial), "leases %s and %s/%s name serial %s", serials[l.Status.Serial], l.Namespace, l.Name, l.Status.Serial)
			serials[l.Status.Serial] = l.Namespace + "/" + l.Name
		}
		Expect(holder).To(HaveLen(chassisCount))

		// The watch: each lease that was Pending became Bound exactly once,
		// on one chassis, one of those released; each released chassis was
		// Ready and unbound between its two leases; none held two at once.
		s := rec.snapshot()
		Expect(s.violations).To(BeEmpty())
		for uid := range pending {
			l := s.leases[uid]
			Expect(l.boundEntries).To(Equal(1), "lease %s/%s", l.namespace, l.name)
			Expect(l.nodeNames).To(HaveLen(1), "lease %s/%s", l.namespace, l.name)
			Expect(releasedChassis).To(HaveKey(l.nodeNames[0]), "lease %s/%s", l.namespace, l.name)
			Expect(l.nodeNames[0]).To(Equal(holder[uid]))
		}
		for uid := range released {
			l := s.leases[uid]
			Expect(l.gone).To(BeTrue(), "lease %s/%s", l.namespace, l.name)
			Expect(l.boundEntries).To(Equal(1), "lease %s/%s", l.namespace, l.name)
			Expect(l.nodeNames).To(HaveLen(1), "lease %s/%s", l.namespace, l.name)
		}
		for name, n := range s.nodes {
			if releasedChassis[name] {
				Expect(n.leases).To(HaveLen(2), "chassis %s's binding named %v", name, n.leases)
				Expect(released).To(HaveKey(n.leases[0]), "chassis %s", name)
				Expect(pending).To(HaveKey(n.leases[1]), "chassis %s", name)
				Expect(n.readyRebinds).To(Equal(1), "chassis %s was bound again without being seen Ready and unbound after its release", name)
			} else {
				Expect(n.leases).To(HaveLen(1), "chassis %s's binding named %v", name, n.leases)
			}
		}
		AddReportEntry("watch", fmt.Sprintf("%d events, %d resumes", s.events, s.resumed), ReportEntryVisibilityAlways)
	})
})
