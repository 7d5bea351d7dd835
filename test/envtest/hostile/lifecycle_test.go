package hostile

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var _ = Describe("lifecycle", Ordered, ContinueOnFailure, func() {
	const class = "m4-hostile-lifecycle"
	var a enrolled

	BeforeAll(func() {
		_, err := harness.CreateClass(ctx, admin, class, 2)
		Expect(err).NotTo(HaveOccurred())
		a = enrollChassis(class)
	})

	It("deletes a lease that never bound at once, and its namespace with it", func() {
		t, err := env.NewTenant(ctx, "careless")
		Expect(err).NotTo(HaveOccurred())
		l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "typo", Namespace: t.Namespace},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "nope", MinimumDuration: "24h"}}
		Expect(t.Client.Create(ctx, l)).To(Succeed())
		Eventually(func() []string {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), l)).To(Succeed())
			return l.Finalizers
		}).Should(ContainElement(fleetv1alpha1.LeaseFinalizer), "the operator took the lease in hand")
		Eventually(func() string {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), l)).To(Succeed())
			for _, c := range l.Status.Conditions {
				if c.Type == leasingv1alpha1.ConditionBound {
					return c.Reason
				}
			}
			return ""
		}).Should(Equal(leasingv1alpha1.ReasonClassNotFound), "positive control: the tenant is told why it waits")

		Expect(t.Client.Delete(ctx, l)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(l), l)) }).Should(BeTrue(),
			"a lease that never bound holds nothing, and goes at once")
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: t.Namespace}}
		Expect(admin.Delete(ctx, ns)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(ns), ns)) }).Should(BeTrue(),
			"kube-controller-manager finishes the namespace once MacRack's finalizers allow it")
	})

	It("lets no one but the node's agent, after the wipe, strip macrack.io/disk-wipe", func() {
		leased := leaseOne(class)
		inst := leased.inst.DeepCopy()
		takeInHand(a, inst)

		By("the tenant strips macrack.io/disk-wipe")
		harness.ExpectPolicyDenial(patchFinalizers(leased.tenant.Client, inst, nil, fleetv1alpha1.DiskWipeFinalizer), "instance.wipe")
		Expect(patchFinalizers(leased.tenant.Client, inst, []string{"example.com/keep"})).To(Succeed(), "positive control: the tenant's own finalizer is its own")

		By("the agent, before the wipe is on record")
		harness.ExpectPolicyDenial(patchFinalizers(a.client, inst, nil, fleetv1alpha1.DiskWipeFinalizer), "instance.wipe")

		Expect(patchFinalizers(leased.tenant.Client, inst, nil, "example.com/keep")).To(Succeed(), "positive control: the tenant removes its own finalizer")

		By("the agent, once it is")
		wipeAndLetGo(a, inst)

		Expect(leased.tenant.Client.Delete(ctx, inst)).To(Succeed())
		Expect(leased.tenant.Client.Delete(ctx, leased.lease.DeepCopy())).To(Succeed())
		op.Step(25*time.Hour, leased.lease)
		Eventually(func() *fleetv1alpha1.Binding { return macNode(a.node).Status.Binding }).Should(BeNil())
		Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(a.node).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeReady))
	})

	It("refuses at admission an instance whose disk cannot hold its image, with both sizes", func() {
		Expect(env.CreateImage(ctx, admin, "sequoia-120", "120Gi")).To(Succeed())
		leased := leaseOne(class)
		small := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "small", Namespace: leased.tenant.Namespace},
			Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: leased.lease.Name, ImageName: "sequoia-120", CPU: 4,
				Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("100Gi")}}
		err := leased.tenant.Client.Create(ctx, small)
		harness.ExpectWebhookDenial(err, "vmacosinstance.macrack.io", "instance.image")
		Expect(err.Error()).To(ContainSubstring("disk 100Gi is smaller than image sequoia-120, which needs 120Gi"))

		missing := small.DeepCopy()
		missing.Name, missing.Spec.ImageName, missing.Spec.Disk = "missing", "no-such-image", resource.MustParse("200Gi")
		harness.ExpectWebhookDenial(leased.tenant.Client.Create(ctx, missing), "vmacosinstance.macrack.io", "instance.image")

		big := small.DeepCopy()
		big.Name, big.Spec.Disk = "big", resource.MustParse("120Gi")
		Expect(leased.tenant.Client.Create(ctx, big)).To(Succeed(), "positive control: a disk that holds the image")

		// Let the chassis go for the next case: the instances have no agent
		// finalizer yet, so release needs no wipe.
		Expect(leased.tenant.Client.Delete(ctx, leased.inst.DeepCopy())).To(Succeed())
		Expect(leased.tenant.Client.Delete(ctx, big)).To(Succeed())
		Expect(leased.tenant.Client.Delete(ctx, leased.lease.DeepCopy())).To(Succeed())
		op.Step(25*time.Hour, leased.lease)
		Eventually(func() *fleetv1alpha1.Binding { return macNode(a.node).Status.Binding }).Should(BeNil())
		Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(a.node).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeReady))
	})

	It("releases at earliestReleaseAt a chassis whose wiped instance only its tenant's finalizer keeps", func() {
		leased := leaseOne(class)
		Expect(leased.lease.Status.NodeName).To(Equal(a.node))
		inst := leased.inst.DeepCopy()
		// The agent takes the instance in hand; its tenant adds a finalizer of
		// its own.
		takeInHand(a, inst)
		Expect(patchFinalizers(leased.tenant.Client, inst, []string{"example.com/keep"})).To(Succeed())

		Expect(leased.tenant.Client.Delete(ctx, leased.lease.DeepCopy())).To(Succeed())
		op.Step(25*time.Hour, leased.lease)
		Eventually(func() *metav1.Time {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
			return inst.DeletionTimestamp
		}).ShouldNot(BeNil(), "release deletes the lease's instances")

		By("the chassis stays out of the pool while its agent has not wiped the disk")
		Consistently(func() *fleetv1alpha1.Binding { return macNode(a.node).Status.Binding }, 2*time.Second).ShouldNot(BeNil())

		By("the agent stops the VM, wipes the disk and lets the instance go")
		wipeAndLetGo(a, inst)

		Eventually(func() *fleetv1alpha1.Binding { return macNode(a.node).Status.Binding }).Should(BeNil(),
			"MacRack's work is done: the tenant's own finalizer does not hold the chassis")
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(leased.lease), &leasingv1alpha1.MacNodeLease{}))
		}).Should(BeTrue())
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
		Expect(inst.Finalizers).To(And(ContainElement("example.com/keep"), Not(ContainElement(fleetv1alpha1.DiskWipeFinalizer))),
			"the tenant's finalizer is the tenant's business")
	})

	It("returns a chassis to the pool only once its agent reports it empty, and tells the tenant what it holds", func() {
		leased := leaseOne(class)
		Expect(leased.lease.Status.NodeName).To(Equal(a.node))
		inst := leased.inst.DeepCopy()
		takeInHand(a, inst)
		By("the agent reports the instance's VM and disk on the chassis")
		reportInventory(a, []fleetv1alpha1.HostVM{{UID: inst.UID, State: "Running"}}, []types.UID{inst.UID})

		Expect(leased.tenant.Client.Delete(ctx, leased.lease.DeepCopy())).To(Succeed())
		op.Step(25*time.Hour, leased.lease)
		Eventually(func() *metav1.Time {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
			return inst.DeletionTimestamp
		}).ShouldNot(BeNil(), "release deletes the lease's instances")

		By("the instance is wiped and goes, but the agent's report still lists its VM and disk")
		wipeAndLetGo(a, inst)
		Eventually(func() bool { return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(inst), inst)) }).Should(BeTrue())
		released := func() metav1.Condition {
			l := &leasingv1alpha1.MacNodeLease{}
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(leased.lease), l)).To(Succeed())
			for _, c := range l.Status.Conditions {
				if c.Type == leasingv1alpha1.ConditionReleased {
					return c
				}
			}
			return metav1.Condition{}
		}
		Eventually(released).Should(And(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", leasingv1alpha1.ReasonChassisNotEmpty),
			HaveField("Message", And(ContainSubstring("1 VM(s): "+string(inst.UID)+" (Running)"), ContainSubstring("1 instance disk(s): "+string(inst.UID))))),
			"the tenant is told what the chassis still holds")
		Consistently(func() *fleetv1alpha1.Binding { return macNode(a.node).Status.Binding }, 2*time.Second).ShouldNot(BeNil(),
			"a chassis that holds a VM and a disk never returns to the pool")

		By("the agent reports the chassis empty")
		reportInventory(a, nil, nil)
		Eventually(func() *fleetv1alpha1.Binding { return macNode(a.node).Status.Binding }).Should(BeNil(), "positive control: an empty chassis returns")
		Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(a.node).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeReady))
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(leased.lease), &leasingv1alpha1.MacNodeLease{}))
		}).Should(BeTrue())
	})
})

var _ = Describe("a retired chassis", Ordered, ContinueOnFailure, func() {
	const class = "m4-hostile-retired"
	var b enrolled

	BeforeAll(func() {
		_, err := harness.CreateClass(ctx, admin, class, 2)
		Expect(err).NotTo(HaveOccurred())
		b = enrollChassis(class)
	})

	It("is retired by an administrator alone, and for good", func() {
		retire := mergePatch(map[string]any{"spec": map[string]any{"retired": true}})
		harness.ExpectRBACDenial(b.client.Patch(ctx, &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: b.node}}, retire),
			"patch", "macnodes")
		t, err := env.NewTenant(ctx, "retirer")
		Expect(err).NotTo(HaveOccurred())
		harness.ExpectRBACDenial(t.Client.Patch(ctx, &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: b.node}}, retire),
			"patch", "macnodes")
		Expect(macNode(b.node).Spec.Retired).To(BeFalse())
	})

	It("lets its instances go unwiped once their lease ends, records each disk, and never returns to the pool", func() {
		leased := leaseOne(class)
		Expect(leased.lease.Status.NodeName).To(Equal(b.node))
		inst := leased.inst.DeepCopy()
		takeInHand(b, inst)

		agentSA := client.ObjectKey{Namespace: agentsNamespace, Name: host.ServiceAccountName(b.node)}
		Expect(admin.Get(ctx, agentSA, &corev1.ServiceAccount{})).To(Succeed(), "positive control: the agent's ServiceAccount, before")

		By("an administrator retires the chassis, whose Mac is dead")
		Expect(admin.Patch(ctx, &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: b.node}},
			mergePatch(map[string]any{"spec": map[string]any{"retired": true}}))).To(Succeed())
		Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(b.node).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeRetired))
		Eventually(func() bool { return apierrors.IsNotFound(admin.Get(ctx, agentSA, &corev1.ServiceAccount{})) }).Should(BeTrue(),
			"the retired chassis' agent loses its ServiceAccount, and with it its tokens")
		err := admin.Patch(ctx, &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: b.node}},
			mergePatch(map[string]any{"spec": map[string]any{"retired": false}}))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "the schema refuses to undo a retirement: %v", err)
		Expect(err.Error()).To(ContainSubstring("a retired chassis stays retired"))

		By("the lease still holds the chassis until earliestReleaseAt")
		Expect(leased.tenant.Client.Delete(ctx, leased.lease.DeepCopy())).To(Succeed())
		Consistently(func() error { return admin.Get(ctx, client.ObjectKeyFromObject(inst), inst) }, time.Second).Should(Succeed(),
			"positive control: before its lease ends, nothing lets the instance go")
		op.Step(25*time.Hour, leased.lease)

		Eventually(func() bool { return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(inst), inst)) }).Should(BeTrue(),
			"the operator lets the instance of a dead Mac go without its wipe")
		Eventually(func() []fleetv1alpha1.UnwipedDisk { return macNode(b.node).Status.UnwipedDisks }).Should(ConsistOf(And(
			HaveField("UID", leased.inst.UID), HaveField("Namespace", leased.tenant.Namespace),
			HaveField("Name", leased.inst.Name), HaveField("LeaseName", leased.lease.Name))), "the unwiped disk is on record")
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(leased.lease), &leasingv1alpha1.MacNodeLease{}))
		}).Should(BeTrue(), "the lease goes, and with it the tenant's hold on its namespace")
		Expect(macNode(b.node).Status.Binding).To(BeNil())
		Consistently(func() fleetv1alpha1.MacNodePhase { return macNode(b.node).Status.Phase }, 2*time.Second).Should(Equal(fleetv1alpha1.MacNodeRetired),
			"a retired chassis never returns to the pool")
		Eventually(func() []string {
			list := &eventsv1.EventList{}
			Expect(admin.List(ctx, list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.Reason == fleetv1alpha1.ReasonDiskLeftUnwiped && e.Regarding.Name == b.node {
					notes = append(notes, e.Note)
				}
			}
			return notes
		}).Should(ContainElement(ContainSubstring(string(leased.inst.UID))))
	})
})

// reportInventory reports, as e's agent, what its chassis holds.
func reportInventory(e enrolled, vms []fleetv1alpha1.HostVM, disks []types.UID) {
	GinkgoHelper()
	inv := map[string]any{"vms": nil, "disks": nil, "observedAt": time.Now().UTC().Format(time.RFC3339)}
	if len(vms) > 0 {
		inv["vms"] = vms
	}
	if len(disks) > 0 {
		inv["disks"] = disks
	}
	Expect(e.client.Status().Patch(ctx, &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: e.node}},
		mergePatch(map[string]any{"status": map[string]any{"reported": map[string]any{"inventory": inv}}}))).To(Succeed())
}
