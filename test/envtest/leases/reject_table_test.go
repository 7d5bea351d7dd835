package leases

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/taints"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

const (
	leaseWebhook    = "vmacnodelease.macrack.io"
	instanceWebhook = "vmacosinstance.macrack.io"
)

var _ = Describe("(e) The 24-hour floor", func() {
	It("refuses a 23h lease with lease.floor, admits 24h, and defaults an unset duration to 24h", Label("proves:lease.floor"), func() {
		tenant, err := env.NewTenant(ctx, "alice")
		Expect(err).NotTo(HaveOccurred())
		class, _ := newClass(0)

		err = tenant.Client.Create(ctx, newLease(tenant.Namespace, "short", class, "23h"))
		harness.ExpectWebhookDenial(err, leaseWebhook, "lease.floor")
		Expect(err.Error()).To(ContainSubstring("lease.floor: minimumDuration 23h is below the 24h floor"))

		Expect(tenant.Client.Create(ctx, newLease(tenant.Namespace, "day", class, "24h"))).To(Succeed(), "positive control")

		unset := newLease(tenant.Namespace, "unset", class, "")
		Expect(tenant.Client.Create(ctx, unset)).To(Succeed())
		Expect(getLease(tenant.Namespace, "unset").Spec.MinimumDuration).To(Equal("24h"))
	})
})

var _ = Describe("(g) Nothing shrinks after binding", func() {
	It("refuses a shorter minimumDuration and an earlier status.earliestReleaseAt, and admits a longer lease", func() {
		tenant, err := env.NewTenant(ctx, "gina")
		Expect(err).NotTo(HaveOccurred())
		class, _ := newClass(1)
		Expect(tenant.Client.Create(ctx, newLease(tenant.Namespace, "l", class, "48h"))).To(Succeed())
		Eventually(leasePhase(tenant.Namespace, "l")).Should(Equal(leasingv1alpha1.LeaseBound))

		l := getLease(tenant.Namespace, "l")
		l.Spec.MinimumDuration = "36h"
		harness.ExpectWebhookDenial(tenant.Client.Update(ctx, l), leaseWebhook, "lease.floor")

		l = getLease(tenant.Namespace, "l")
		l.Status.EarliestReleaseAt.Time = l.Status.EarliestReleaseAt.Add(-time.Hour)
		err = admin.Status().Update(ctx, l)
		harness.ExpectWebhookDenial(err, leaseWebhook, "lease.floor")
		Expect(err.Error()).To(ContainSubstring("status.earliestReleaseAt cannot move earlier"))

		l = getLease(tenant.Namespace, "l")
		l.Spec.MinimumDuration = "72h"
		Expect(tenant.Client.Update(ctx, l)).To(Succeed(), "positive control: a lease may grow")
	})
})

var _ = Describe("(a) Two live instances per lease", func() {
	It("refuses a third live instance with instance.cap, counting a Stopping one, and admits it once one has Stopped", Label("proves:instance.cap"), func() {
		tenant, err := env.NewTenant(ctx, "anna")
		Expect(err).NotTo(HaveOccurred())
		class, _ := newClass(1)
		Expect(tenant.Client.Create(ctx, newLease(tenant.Namespace, "l", class, "24h"))).To(Succeed())
		Eventually(leasePhase(tenant.Namespace, "l")).Should(Equal(leasingv1alpha1.LeaseBound))

		// The webhook reads the lease from the operator's cache, which may
		// show it Bound a moment after this test's own read does.
		Eventually(func() error { return tenant.Client.Create(ctx, newInstance(tenant.Namespace, "ci-1", "l")) }).Should(Succeed(), "positive control: the first")
		Expect(tenant.Client.Create(ctx, newInstance(tenant.Namespace, "ci-2", "l"))).To(Succeed(), "positive control: the second")
		// The webhook reads its caches; let them see both. A dry run, so that
		// a probe that comes before the caches catch up stores nothing.
		Eventually(func() error {
			return tenant.Client.Create(ctx, newInstance(tenant.Namespace, "ci-3", "l"), client.DryRunAll)
		}).Should(MatchError(ContainSubstring("instance.cap:")))
		harness.ExpectWebhookDenial(tenant.Client.Create(ctx, newInstance(tenant.Namespace, "ci-3", "l")), instanceWebhook, "instance.cap")

		// The host agent (played here by the administrator) reports ci-2
		// Stopping: still live, still counted.
		setRuntime(tenant.Namespace, "ci-2", computev1alpha1.VMStopping)
		Consistently(func() error {
			return tenant.Client.Create(ctx, newInstance(tenant.Namespace, "ci-3", "l"))
		}, "1s").Should(MatchError(ContainSubstring("instance.cap:")))

		setRuntime(tenant.Namespace, "ci-2", computev1alpha1.VMStopped)
		Eventually(func() error {
			return tenant.Client.Create(ctx, newInstance(tenant.Namespace, "ci-3", "l"))
		}).Should(Succeed(), "positive control: a Stopped instance frees its place")
	})
})

func setRuntime(ns, name string, phase computev1alpha1.VMPhase) {
	GinkgoHelper()
	// The placement controller writes the instance's status too: retry on
	// a conflict, as the agent's patch would never meet one.
	Eventually(func() error {
		i := &computev1alpha1.MacOSInstance{}
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, i); err != nil {
			return err
		}
		i.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: phase}
		return admin.Status().Update(ctx, i)
	}).Should(Succeed())
}

var _ = Describe("(b) Tenant B", func() {
	It("binds only a chassis of its own, cannot start instances in a Held lease, and cannot write status", Label("proves:instance.tenant"), func() {
		a, err := env.NewTenant(ctx, "amy")
		Expect(err).NotTo(HaveOccurred())
		b, err := env.NewTenant(ctx, "bob")
		Expect(err).NotTo(HaveOccurred())
		class, nodes := newClass(2)

		Expect(a.Client.Create(ctx, newLease(a.Namespace, "build", class, "24h"))).To(Succeed())
		Eventually(leasePhase(a.Namespace, "build")).Should(Equal(leasingv1alpha1.LeaseBound))
		Expect(b.Client.Create(ctx, newLease(b.Namespace, "build", class, "24h"))).To(Succeed())
		Eventually(leasePhase(b.Namespace, "build")).Should(Equal(leasingv1alpha1.LeaseBound))
		aNode, bNode := getLease(a.Namespace, "build").Status.NodeName, getLease(b.Namespace, "build").Status.NodeName
		Expect(bNode).NotTo(Equal(aNode), "B's lease, named like A's, took A's chassis")
		Expect([]string{aNode, bNode}).To(ConsistOf(nodes))
		Expect(macNode(bNode).Status.Binding.LeaseNamespace).To(Equal(b.Namespace))
		Eventually(func() bool { return hasTaint(node(bNode), taints.LeasedKey, b.Namespace) }).Should(BeTrue())

		// Status belongs to the operator: RBAC refuses B's writes.
		l := getLease(b.Namespace, "build")
		l.Status.EarliestReleaseAt = l.Status.BoundAt
		harness.ExpectRBACDenial(b.Client.Status().Update(ctx, l), "update", "macnodeleases/status")
		Eventually(func() error { return b.Client.Create(ctx, newInstance(b.Namespace, "ci-1", "build")) }).Should(Succeed(), "positive control: an instance in a Bound lease")
		i := &computev1alpha1.MacOSInstance{}
		Expect(b.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: "ci-1"}, i)).To(Succeed())
		i.Status.NodeName = aNode
		harness.ExpectRBACDenial(b.Client.Status().Update(ctx, i), "update", "macosinstances/status")
		// The lease's status moves under B (the webhook records ci-1's
		// reservation, and drops it once ci-1 is stored): B retries on a
		// conflict, as kubectl does.
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l = getLease(b.Namespace, "build")
			l.Labels = map[string]string{"team": "ios"}
			return b.Client.Update(ctx, l)
		})).To(Succeed(), "positive control: B may edit its lease")

		// Deleted at +1h, B's lease is Held, and takes no new instance.
		tick("1h")
		Expect(b.Client.Delete(ctx, getLease(b.Namespace, "build"))).To(Succeed())
		Eventually(leasePhase(b.Namespace, "build")).Should(Equal(leasingv1alpha1.LeaseHeld))
		Eventually(func() error { // a dry run, as above
			return b.Client.Create(ctx, newInstance(b.Namespace, "ci-2", "build"), client.DryRunAll)
		}).Should(MatchError(ContainSubstring("instance.tenant:")))
		harness.ExpectWebhookDenial(b.Client.Create(ctx, newInstance(b.Namespace, "ci-2", "build")), instanceWebhook, "instance.tenant")
	})
})

var _ = Describe("(h) A chassis whose kernel VM quota stuck", func() {
	It("refuses a new instance with quarantine.fence while its chassis is Quarantined, and admits the same instance once the chassis is healthy", Label("proves:quarantine.fence"), func() {
		tenant, err := env.NewTenant(ctx, "quinn")
		Expect(err).NotTo(HaveOccurred())
		class, nodes := newClass(1)
		Expect(tenant.Client.Create(ctx, newLease(tenant.Namespace, "l", class, "24h"))).To(Succeed())
		Eventually(leasePhase(tenant.Namespace, "l")).Should(Equal(leasingv1alpha1.LeaseBound))
		Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(nodes[0]).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeLeased))
		// The webhook reads the lease from the operator's cache, which may
		// show it Bound a moment after this test's own read does.
		Eventually(func() error { return tenant.Client.Create(ctx, newInstance(tenant.Namespace, "ci-1", "l")) }).Should(Succeed(), "positive control: a healthy (Leased) chassis admits")

		// The quarantine loop, played by the administrator, fences the
		// chassis: its quota stuck while ci-1 runs, which the agent has yet
		// to stop (so the loop asks for no reboot).
		ci1 := &computev1alpha1.MacOSInstance{}
		Expect(admin.Get(ctx, types.NamespacedName{Namespace: tenant.Namespace, Name: "ci-1"}, ci1)).To(Succeed())
		setQuarantine(nodes[0], fleetv1alpha1.MacNodeQuarantined, nil, ci1.UID)
		Eventually(func() error { // a dry run, as above: the webhook's cache may lag
			return tenant.Client.Create(ctx, newInstance(tenant.Namespace, "ci-2", "l"), client.DryRunAll)
		}).Should(MatchError(ContainSubstring("quarantine.fence:")))
		err = tenant.Client.Create(ctx, newInstance(tenant.Namespace, "ci-2", "l"))
		harness.ExpectWebhookDenial(err, instanceWebhook, "quarantine.fence")
		Expect(err.Error()).To(ContainSubstring("quarantine.fence: chassis " + macNode(nodes[0]).Spec.Serial + " is Quarantined: " +
			"its kernel VM quota stuck and MacRack is rebooting it; new instances are refused until it recovers; the instances you have restart after the reboot"))

		// The probe in the new boot passed: the chassis serves its lease again.
		recovered := metav1.Now()
		setQuarantine(nodes[0], fleetv1alpha1.MacNodeLeased, &recovered, "")
		Eventually(func() error {
			return tenant.Client.Create(ctx, newInstance(tenant.Namespace, "ci-2", "l"))
		}).Should(Succeed(), "positive control: the same instance, once the chassis is healthy")
	})
})

// setQuarantine writes the chassis' phase and its quarantine, as the
// quarantine loop would: fenced while recoveredAt is nil, recovered once it
// is set. With running, the agent's report, played too, shows that
// instance's VM still running. A merge patch of those fields alone, retried
// on a conflict with the node controller.
func setQuarantine(name string, phase fleetv1alpha1.MacNodePhase, recoveredAt *metav1.Time, running types.UID) {
	GinkgoHelper()
	Eventually(func() error {
		mn := macNode(name)
		before := mn.DeepCopy()
		mn.Status.Phase = phase
		if mn.Status.Quarantine == nil {
			mn.Status.Quarantine = &fleetv1alpha1.QuarantineStatus{BootID: "boot-1", Evidence: "VZErrorDomain code 6 with 1 VM running", QuarantinedAt: metav1.Now()}
		}
		mn.Status.Quarantine.RecoveredAt = recoveredAt
		if running != "" {
			mn.Status.Reported.Inventory = &fleetv1alpha1.HostInventory{
				VMs: []fleetv1alpha1.HostVM{{UID: running, State: "Running"}}, ObservedAt: metav1.Now()}
		}
		return admin.Status().Patch(ctx, mn, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	}).Should(Succeed())
}

var _ = Describe("(c) A delete at +3h", func() {
	It("gives Held: the chassis keeps the tenant, takes no one else, and the tenant cannot pull the finalizer", Label("proves:lease.release"), func() {
		tenant, err := env.NewTenant(ctx, "carl")
		Expect(err).NotTo(HaveOccurred())
		other, err := env.NewTenant(ctx, "dora")
		Expect(err).NotTo(HaveOccurred())
		class, nodes := newClass(1)
		Expect(tenant.Client.Create(ctx, newLease(tenant.Namespace, "l", class, "24h"))).To(Succeed())
		Eventually(leasePhase(tenant.Namespace, "l")).Should(Equal(leasingv1alpha1.LeaseBound))
		l := getLease(tenant.Namespace, "l")
		controllerutil.AddFinalizer(l, "example.com/backup")
		Expect(tenant.Client.Update(ctx, l)).To(Succeed())

		tick("3h", l)
		Expect(tenant.Client.Delete(ctx, getLease(tenant.Namespace, "l"))).To(Succeed())
		Eventually(leasePhase(tenant.Namespace, "l")).Should(Equal(leasingv1alpha1.LeaseHeld))
		held := getLease(tenant.Namespace, "l")
		Expect(held.Status.HeldAt).NotTo(BeNil())
		Expect(hasTaint(node(nodes[0]), taints.LeasedKey, tenant.Namespace)).To(BeTrue(), "the Node keeps the tenant's taint")
		Expect(node(nodes[0]).Labels[taints.TenantLabel]).To(Equal(tenant.Namespace))

		Expect(other.Client.Create(ctx, newLease(other.Namespace, "l", class, "24h"))).To(Succeed())
		Eventually(leasePhase(other.Namespace, "l")).Should(Equal(leasingv1alpha1.LeasePending))
		Consistently(leasePhase(other.Namespace, "l"), "2s").Should(Equal(leasingv1alpha1.LeasePending))
		Expect(getLease(other.Namespace, "l").Status.Conditions).To(ContainElement(HaveField("Reason", leasingv1alpha1.ReasonNoCapacity)))

		held = getLease(tenant.Namespace, "l")
		held.Finalizers = []string{"example.com/backup"}
		err = tenant.Client.Update(ctx, held)
		harness.ExpectWebhookDenial(err, leaseWebhook, "lease.release")

		held = getLease(tenant.Namespace, "l")
		held.Finalizers = []string{fleetv1alpha1.LeaseFinalizer}
		Expect(tenant.Client.Update(ctx, held)).To(Succeed(), "positive control: a foreign finalizer is the tenant's to remove")
		Consistently(leasePhase(tenant.Namespace, "l"), "1s").Should(Equal(leasingv1alpha1.LeaseHeld))
		Expect(macNode(nodes[0]).Status.Binding.LeaseNamespace).To(Equal(tenant.Namespace))
	})
})

var _ = Describe("(d) A delete at +25h", func() {
	It("waits for every disk wipe, then gives Released and returns the chassis to the pool", func() {
		tenant, err := env.NewTenant(ctx, "eve")
		Expect(err).NotTo(HaveOccurred())
		class, nodes := newClass(1)
		Expect(tenant.Client.Create(ctx, newLease(tenant.Namespace, "l", class, "24h"))).To(Succeed())
		Eventually(leasePhase(tenant.Namespace, "l")).Should(Equal(leasingv1alpha1.LeaseBound))
		for _, name := range []string{"ci-1", "ci-2"} {
			inst := newInstance(tenant.Namespace, name, "l")
			inst.Finalizers = []string{fleetv1alpha1.DiskWipeFinalizer} // the agent's, played by the test
			// The webhook reads the lease from the operator's cache, which
			// may show it Bound a moment after this test's own read does.
			Eventually(func() error { return tenant.Client.Create(ctx, inst) }).Should(Succeed())
		}

		l := getLease(tenant.Namespace, "l")
		tick("25h", l)
		Expect(tenant.Client.Delete(ctx, l)).To(Succeed())
		Eventually(func() []leasingv1alpha1.MacNodeLeaseStatus {
			return []leasingv1alpha1.MacNodeLeaseStatus{getLease(tenant.Namespace, "l").Status}
		}).Should(ContainElement(HaveField("Conditions", ContainElement(HaveField("Reason", leasingv1alpha1.ReasonAwaitingDiskWipe)))))
		Expect(leasePhase(tenant.Namespace, "l")()).NotTo(Equal(leasingv1alpha1.LeaseHeld), "past earliestReleaseAt there is no hold")
		Expect(macNode(nodes[0]).Status.Binding).NotTo(BeNil(), "the chassis stays out of the pool until the disks are wiped")

		// The agent wipes each disk, records it, then removes its finalizer:
		// played by the test, the removal as the operator, whom instance.wipe
		// also lets (the hostile suite holds the agent's own path).
		for _, name := range []string{"ci-1", "ci-2"} {
			i := &computev1alpha1.MacOSInstance{}
			Expect(admin.Get(ctx, types.NamespacedName{Namespace: tenant.Namespace, Name: name}, i)).To(Succeed())
			Expect(i.DeletionTimestamp).NotTo(BeNil(), "the operator deletes the lease's instances")
			wiped := metav1.Now()
			i.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMStopped, WipedAt: &wiped}
			Expect(admin.Status().Update(ctx, i)).To(Succeed())
			i.Finalizers = nil
			Expect(op.Client.Update(ctx, i)).To(Succeed())
		}
		Eventually(leasePhase(tenant.Namespace, "l")).Should(Equal(leasingv1alpha1.MacNodeLeasePhase("gone")), "the lease is gone once released")
		Eventually(func() *fleetv1alpha1.Binding { return macNode(nodes[0]).Status.Binding }).Should(BeNil())
		Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(nodes[0]).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeReady))
		mn := macNode(nodes[0])
		Expect(mn.Status.History).To(HaveLen(1))
		Expect(mn.Status.History[0].LeaseNamespace).To(Equal(tenant.Namespace))
		Eventually(func() bool { return hasTaint(node(nodes[0]), taints.UnleasedKey, "") }).Should(BeTrue())
		Expect(hasTaint(node(nodes[0]), taints.LeasedKey, tenant.Namespace)).To(BeFalse())

		next, err := env.NewTenant(ctx, "fay")
		Expect(err).NotTo(HaveOccurred())
		Expect(next.Client.Create(ctx, newLease(next.Namespace, "l", class, "24h"))).To(Succeed())
		Eventually(leasePhase(next.Namespace, "l")).Should(Equal(leasingv1alpha1.LeaseBound), "the chassis is back in the pool")
	})
})

var _ = Describe("(f) Twenty leases race for one chassis", func() {
	It("binds exactly one, and a watch never sees two bindings, across 20 repetitions", func() {
		for rep := 0; rep < 20; rep++ {
			class, nodes := newClass(1)
			watcher := harness.WatchBindings(ctx, env, class)
			var tenants []*harness.Tenant
			for i := 0; i < 20; i++ {
				t, err := env.NewTenant(ctx, unique("racer"))
				Expect(err).NotTo(HaveOccurred())
				tenants = append(tenants, t)
			}
			done := make(chan error, len(tenants))
			for _, t := range tenants {
				go func(t *harness.Tenant) { done <- t.Client.Create(ctx, newLease(t.Namespace, "race", class, "24h")) }(t)
			}
			for range tenants {
				Expect(<-done).To(Succeed())
			}
			bound := func() int {
				n := 0
				for _, t := range tenants {
					if leasePhase(t.Namespace, "race")() == leasingv1alpha1.LeaseBound {
						n++
					}
				}
				return n
			}
			Eventually(bound).Should(Equal(1), "repetition %d", rep)
			Consistently(bound, "500ms").Should(Equal(1), "repetition %d", rep)
			seen := watcher.Stop()
			Expect(seen.MaxBoundLeases).To(Equal(1), "repetition %d: a watch saw %d leases Bound at once", rep, seen.MaxBoundLeases)
			Expect(seen.Rebinds).To(BeZero(), "repetition %d: a MacNode binding moved from one lease to another", rep)
			Expect(macNode(nodes[0]).Status.Binding).NotTo(BeNil())
		}
	})
})
