package hostile

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// Round 3 (issue 31), section 1 and the placement gap: a fractional
// minimumDuration wedged a lease and suppressed its billing record, and an
// instance created as its lease was deleted was placed on the Held chassis.
var _ = Describe("round 3: the floor and the held lease", Ordered, ContinueOnFailure, func() {
	// One VM per chassis, so that an instance can be kept waiting for a
	// slot while its lease is deleted.
	const class = "m4-hostile-round3-floor"
	var a enrolled

	BeforeAll(func() {
		_, err := harness.CreateClass(ctx, admin, class, 1)
		Expect(err).NotTo(HaveOccurred())
		a = enrollChassis(class)
	})

	getLease := func(l *leasingv1alpha1.MacNodeLease) *leasingv1alpha1.MacNodeLease {
		GinkgoHelper()
		got := &leasingv1alpha1.MacNodeLease{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), got)).To(Succeed())
		return got
	}
	bindLease := func(t *harness.Tenant, minimum string) *leasingv1alpha1.MacNodeLease {
		GinkgoHelper()
		l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{GenerateName: "l-", Namespace: t.Namespace},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: minimum}}
		Expect(t.Client.Create(ctx, l)).To(Succeed(), "a %s lease is admitted", minimum)
		Eventually(func() leasingv1alpha1.MacNodeLeasePhase { return getLease(l).Status.Phase }).Should(Equal(leasingv1alpha1.LeaseBound),
			"a %s lease binds", minimum)
		return getLease(l)
	}
	// releaseChassis deletes the lease (if still there), steps the clock
	// past any earliestReleaseAt, and waits for the chassis to be free.
	releaseChassis := func(t *harness.Tenant, l *leasingv1alpha1.MacNodeLease) {
		GinkgoHelper()
		Expect(client.IgnoreNotFound(t.Client.Delete(ctx, l.DeepCopy()))).To(Succeed())
		op.Step(27*time.Hour, l)
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(l), &leasingv1alpha1.MacNodeLease{}))
		}).Should(BeTrue())
		Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(a.node).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeReady))
	}
	// noRecordedRefusal: the operator's own status writes all went through.
	noRecordedRefusal := func(l *leasingv1alpha1.MacNodeLease) {
		GinkgoHelper()
		c := meta.FindStatusCondition(getLease(l).Status.Conditions, leasingv1alpha1.ConditionRecorded)
		Expect(c).To(BeNil(), "no status write of the operator's was refused")
	}

	It("a tenant lengthens a bound 24h lease to 25h0.5s and deletes it: the lease goes Held, keeps its record, and no write loops (shortening it by the half second: refused by the ValidatingAdmissionPolicy lease.floor)", func() {
		t, err := env.NewTenant(ctx, "wedger")
		Expect(err).NotTo(HaveOccurred())
		l := bindLease(t, "24h")
		bound := l.Status.BoundAt.Time

		Expect(t.Client.Patch(ctx, l.DeepCopy(), mergePatch(map[string]any{"spec": map[string]any{"minimumDuration": "25h0.5s"}}))).To(Succeed(),
			"positive control: lengthening a bound lease, fraction and all, is admitted")
		err = t.Client.Patch(ctx, l.DeepCopy(), mergePatch(map[string]any{"spec": map[string]any{"minimumDuration": "25h"}}))
		harness.ExpectPolicyDenial(err, "lease.floor")
		Expect(err.Error()).To(ContainSubstring("25h0.5s"), "the refusal names the minimum it would shrink")

		want := bound.Add(25*time.Hour + time.Second)
		Eventually(func() time.Time { return getLease(l).Status.EarliestReleaseAt.Time }).Should(BeTemporally("==", want),
			"the lease's earliestReleaseAt is boundAt + 25h0.5s, up to the whole second")
		Expect(macNode(a.node).Status.Binding.EarliestReleaseAt.Time).To(BeTemporally("==", want), "the MacNode's binding agrees with the lease")

		Expect(t.Client.Delete(ctx, l.DeepCopy())).To(Succeed())
		Eventually(func() leasingv1alpha1.MacNodeLeasePhase { return getLease(l).Status.Phase }).Should(Equal(leasingv1alpha1.LeaseHeld))
		held := getLease(l)
		Expect(held.Status.HeldAt).NotTo(BeNil(), "a Held lease says since when")
		Expect(held.Status.Audit).NotTo(BeNil())
		var types []string
		for _, rec := range held.Status.Audit.Records {
			types = append(types, rec.Type)
		}
		Expect(types).To(ContainElement("held"), "the held record is journaled for the stream")
		Expect(held.Finalizers).To(ContainElement(fleetv1alpha1.LeaseFinalizer))
		noRecordedRefusal(l)

		By("no pass rewrites the lease or its chassis while it is held")
		// The exporter's publish of Held's record is the one thing still
		// due; a lease's cursor is not written for it (issue 39): wait for
		// the stream to hold it, so that what follows sees only the
		// controllers.
		Eventually(func() bool {
			cur := getLease(l)
			// Records go out in order: the last one out says all are.
			return stream.has(fmt.Sprintf("lease/%s/%d", cur.UID, cur.Status.Audit.NextSequence-1))
		}).Should(BeTrue(), "the stream acknowledged every record of the held lease")
		held = getLease(l)
		leaseRV, nodeRV := held.ResourceVersion, macNode(a.node).ResourceVersion
		op.Step(time.Second, l)
		Consistently(func() []string { return []string{getLease(l).ResourceVersion, macNode(a.node).ResourceVersion} }, "2s", "100ms").
			Should(Equal([]string{leaseRV, nodeRV}), "a held lease's reconcile writes nothing, and nothing retries")

		releaseChassis(t, l)
	})

	It("a tenant creates leases of 24h0.5s, 86400.25s, 1440m0.001s and 24h0m0.000000001s: each binds until the next whole second", func() {
		for _, minimum := range []string{"24h0.5s", "86400.25s", "1440m0.001s", "24h0m0.000000001s"} {
			By(minimum)
			t, err := env.NewTenant(ctx, "fraction")
			Expect(err).NotTo(HaveOccurred())
			l := bindLease(t, minimum)
			Expect(l.Status.EarliestReleaseAt.Sub(l.Status.BoundAt.Time)).To(Equal(24*time.Hour+time.Second),
				"earliestReleaseAt is %s after boundAt, rounded up to the whole second", minimum)
			Expect(macNode(a.node).Status.Binding.EarliestReleaseAt.Time).To(BeTemporally("==", l.Status.EarliestReleaseAt.Time))
			noRecordedRefusal(l)
			releaseChassis(t, l)
		}
	})

	It("a tenant creates a 86399.999s lease: refused by the ValidatingAdmissionPolicy lease.floor", func() {
		t, err := env.NewTenant(ctx, "short")
		Expect(err).NotTo(HaveOccurred())
		l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{GenerateName: "l-", Namespace: t.Namespace},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "86399.999s"}}
		err = t.Client.Create(ctx, l)
		harness.ExpectPolicyDenial(err, "lease.floor")
		Expect(err.Error()).To(ContainSubstring("minimumDuration 86399.999s is below the 24h floor"))
	})

	It("a tenant creates an instance as its lease is deleted: refused by policy instance.tenant at placement, never placed", func() {
		leased := leaseOne(class) // positive control: an instance of a Bound lease is placed
		t := leased.tenant
		// Its agent reports the first instance Stopped: no longer live for
		// instance.cap, it still holds the chassis' one slot.
		Expect(a.client.Status().Patch(ctx, leased.inst.DeepCopy(), mergePatch(map[string]any{"status": map[string]any{
			"runtime": map[string]any{"phase": string(computev1alpha1.VMStopped)}}}))).To(Succeed())
		waiting := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: t.Namespace},
			Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: leased.lease.Name, ImageName: "img", CPU: 4,
				Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("100Gi")}}
		Expect(t.Client.Create(ctx, waiting)).To(Succeed(), "positive control: an instance of a Bound lease is admitted")
		Eventually(func() string {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(waiting), waiting)).To(Succeed())
			if c := meta.FindStatusCondition(waiting.Status.Conditions, computev1alpha1.ConditionPlaced); c != nil {
				return c.Reason
			}
			return ""
		}).Should(Equal(computev1alpha1.ReasonCapacityExceeded), "the one slot is taken: it waits")

		Expect(t.Client.Delete(ctx, leased.lease.DeepCopy())).To(Succeed())
		Eventually(func() leasingv1alpha1.MacNodeLeasePhase { return getLease(leased.lease).Status.Phase }).Should(Equal(leasingv1alpha1.LeaseHeld))
		// The slot frees: nothing but the lease's state keeps the waiting
		// instance off the chassis now.
		Expect(t.Client.Delete(ctx, leased.inst.DeepCopy())).To(Succeed())
		Eventually(func() []fleetv1alpha1.Slot { return macNode(a.node).Status.Slots }).Should(BeEmpty())
		Eventually(func() string {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(waiting), waiting)).To(Succeed())
			if c := meta.FindStatusCondition(waiting.Status.Conditions, computev1alpha1.ConditionPlaced); c != nil {
				return c.Reason + ": " + c.Message
			}
			return ""
		}).Should(And(HavePrefix(computev1alpha1.ReasonPolicyDenied), ContainSubstring("instance.tenant: lease "+t.Namespace+"/"+leased.lease.Name+" is Held, not Bound")))
		Consistently(func() string {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(waiting), waiting)).To(Succeed())
			return waiting.Status.NodeName
		}, "1s", "100ms").Should(BeEmpty(), "no slot is claimed for it on the held chassis")
		Expect(macNode(a.node).Status.Slots).To(BeEmpty())

		Expect(t.Client.Delete(ctx, waiting)).To(Succeed())
		releaseChassis(t, leased.lease)
	})
})
