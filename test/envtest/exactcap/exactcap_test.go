package exactcap

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

const (
	image   = "sequoia-15.5-xcode-16.4"
	webhook = "vmacosinstance.macrack.io"
)

var names atomic.Int64

func unique(prefix string) string { return fmt.Sprintf("%s-%d", prefix, names.Add(1)) }

// leased is a tenant with a Bound lease on a chassis of its own, of a
// class of vms VMs.
func leased(vms int32) (*harness.Tenant, *leasingv1alpha1.MacNodeLease) {
	GinkgoHelper()
	class := unique("m4")
	_, err := harness.CreateClass(ctx, admin, class, vms)
	Expect(err).NotTo(HaveOccurred())
	node, err := harness.CreateChassis(ctx, admin, class, harness.GoodFacts())
	Expect(err).NotTo(HaveOccurred())
	Eventually(func() fleetv1alpha1.MacNodePhase {
		mn := &fleetv1alpha1.MacNode{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: node}, mn)).To(Succeed())
		return mn.Status.Phase
	}).Should(Equal(fleetv1alpha1.MacNodeReady))
	t, err := env.NewTenant(ctx, unique("tenant"))
	Expect(err).NotTo(HaveOccurred())
	l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "mini", Namespace: t.Namespace},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h"}}
	Expect(t.Client.Create(ctx, l)).To(Succeed())
	Eventually(func() leasingv1alpha1.MacNodeLeasePhase { return lease(l).Status.Phase }).Should(Equal(leasingv1alpha1.LeaseBound))
	return t, lease(l)
}

func lease(l *leasingv1alpha1.MacNodeLease) *leasingv1alpha1.MacNodeLease {
	GinkgoHelper()
	got := &leasingv1alpha1.MacNodeLease{}
	Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), got)).To(Succeed())
	return got
}

func instance(l *leasingv1alpha1.MacNodeLease, name string) *computev1alpha1.MacOSInstance {
	return &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.Namespace},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: l.Name, ImageName: image, CPU: 4,
			Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("100Gi")}}
}

// reserved are the names the lease's reservations hold.
func reserved(l *leasingv1alpha1.MacNodeLease) []string {
	var out []string
	for _, r := range lease(l).Status.Reservations {
		out = append(out, r.Name)
	}
	return out
}

// reservationManagers are the field managers that own the lease's
// status.reservations (none once it is empty).
func reservationManagers(l *leasingv1alpha1.MacNodeLease) []string {
	GinkgoHelper()
	var managers []string
	for _, mf := range lease(l).ManagedFields {
		if mf.FieldsV1 != nil && strings.Contains(mf.FieldsV1.GetRawString(), `"f:reservations"`) {
			managers = append(managers, mf.Manager)
		}
	}
	return managers
}

// admissions is how many instance creates a replica's webhook answered.
// instanceQuota creates a ResourceQuota of one instance in ns, and returns
// it with what kube-controller-manager observed of its hard count.
func instanceQuota(ns string) (*corev1.ResourceQuota, func() string) {
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "vms", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/macosinstances.compute.macrack.io": resource.MustParse("1")}}}
	Expect(admin.Create(ctx, quota)).To(Succeed())
	return quota, func() string {
		q := &corev1.ResourceQuota{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(quota), q)).To(Succeed())
		h := q.Status.Hard["count/macosinstances.compute.macrack.io"]
		return h.String()
	}
}

func admissions(op *harness.Operator) float64 {
	GinkgoHelper()
	families, err := op.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	var n float64
	for _, f := range families {
		if f.GetName() != "macrack_admission_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["kind"] == "MacOSInstance" && labels["operation"] == "CREATE" {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// race sends 50 creates at once on a new lease of a vms-VM class, through
// the balancer, and checks that exactly vms are admitted.
func race(vms int32) {
	GinkgoHelper()
	t, l := leased(vms)
	before := [2]float64{admissions(replicas[0]), admissions(replicas[1])}

	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer GinkgoRecover()
			errs[i] = t.Client.Create(ctx, instance(l, fmt.Sprintf("race-%02d", i)))
		}()
	}
	wg.Wait()

	admitted := 0
	for _, err := range errs {
		if err == nil {
			admitted++
			continue
		}
		harness.ExpectWebhookDenial(err, webhook, "instance.cap")
		Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("already has %d live instances", vms)))
		Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("a chassis runs at most %d", vms)))
	}
	Expect(admitted).To(Equal(int(vms)), "exactly the class's vmCapacity is admitted")
	list := &computev1alpha1.MacOSInstanceList{}
	Expect(admin.List(ctx, list, client.InNamespace(t.Namespace))).To(Succeed())
	Expect(list.Items).To(HaveLen(int(vms)), "and stored")

	By("the next create counts the stored instances live, not their reservations")
	err := t.Client.Create(ctx, instance(l, "one-more"))
	harness.ExpectWebhookDenial(err, webhook, "instance.cap")
	for _, i := range list.Items {
		Expect(err.Error()).To(ContainSubstring(i.Name))
	}
	Expect(err.Error()).NotTo(ContainSubstring("not stored yet"))

	Expect(admissions(replicas[0])).To(BeNumerically(">", before[0]), "the first replica answered some creates")
	Expect(admissions(replicas[1])).To(BeNumerically(">", before[1]), "the second replica answered some creates")

	By("status.reservations has one writer, the webhook's field manager, which drops them once their instances are stored")
	Expect(reservationManagers(l)).NotTo(ContainElement(Not(Equal(leasingv1alpha1.ReservationFieldManager))))
	Eventually(func() []string { return reserved(l) }).Should(BeEmpty())
}

var _ = Describe("instance.cap at admission", func() {
	It("admits exactly 2 of 50 parallel creates on one lease of a 2-VM class, through two webhook replicas, and refuses every other with instance.cap", Label("proves:instance.cap"), func() {
		race(2)
	})
	It("admits exactly 1 of 50 parallel creates on one lease of a 1-VM class, through two webhook replicas, and refuses every other with instance.cap", func() {
		race(1)
	})

	It("writes nothing for a dry run: two dry runs, then a real create, succeed, and a dry run past the cap is refused", func() {
		t, l := leased(2)
		for i := range 2 {
			Expect(t.Client.Create(ctx, instance(l, fmt.Sprintf("dry-%d", i)), client.DryRunAll)).To(Succeed())
		}
		Expect(reserved(l)).To(BeEmpty(), "a dry run reserves nothing")
		Expect(t.Client.Create(ctx, instance(l, "real-0"))).To(Succeed(), "two dry runs do not block a real create")
		Expect(t.Client.Create(ctx, instance(l, "real-1"))).To(Succeed())
		err := t.Client.Create(ctx, instance(l, "dry-2"), client.DryRunAll)
		harness.ExpectWebhookDenial(err, webhook, "instance.cap")
	})

	It("leaks nothing when an existing name is POSTed again: the next create is admitted", func() {
		t, l := leased(2)
		a := instance(l, "a")
		Expect(t.Client.Create(ctx, a)).To(Succeed())
		err := t.Client.Create(ctx, instance(l, "a"))
		Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), "the API server refuses the name: %v", err)
		for _, r := range lease(l).Status.Reservations {
			Expect(r.UID).To(Equal(string(a.UID)), "the refused re-POST holds no reservation; only the stored a's may remain")
		}
		Expect(t.Client.Create(ctx, instance(l, "b"))).To(Succeed(), "the room the re-POST did not take is there")
		err = t.Client.Create(ctx, instance(l, "c"))
		harness.ExpectWebhookDenial(err, webhook, "instance.cap")
	})

	It("counts a ResourceQuota refusal after the webhook for twice the webhook's timeout at most, then admits the next create", func() {
		t, l := leased(2)
		quota, observed := instanceQuota(t.Namespace)
		Eventually(observed).Should(Equal("1"), "kube-controller-manager observed the quota")
		Expect(t.Client.Create(ctx, instance(l, "q1"))).To(Succeed())
		err := t.Client.Create(ctx, instance(l, "q2"))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the quota refuses after the webhook: %v", err)
		Expect(err.Error()).To(ContainSubstring("exceeded quota"))
		Expect(reserved(l)).To(ContainElement("q2"), "the refused create's reservation is there, as the webhook cannot know")
		Expect(reservationManagers(l)).To(ConsistOf(leasingv1alpha1.ReservationFieldManager), "written by the webhook's field manager alone")

		Expect(admin.Patch(ctx, quota, client.RawPatch(types.MergePatchType,
			[]byte(`{"spec":{"hard":{"count/macosinstances.compute.macrack.io":"2"}}}`)))).To(Succeed())
		Eventually(observed).Should(Equal("2"))
		err = t.Client.Create(ctx, instance(l, "q3"))
		harness.ExpectWebhookDenial(err, webhook, "instance.cap")
		Expect(err.Error()).To(ContainSubstring("q2 (admitted, not stored yet)"), "within the window the reservation counts")

		By("past twice the webhook's timeout the operator's pass drops it")
		clk.Step(leasingv1alpha1.ReservationTTL + time.Second)
		Eventually(func() []string { return reserved(l) }).ShouldNot(ContainElement("q2"))
		Expect(t.Client.Create(ctx, instance(l, "q3"))).To(Succeed(), "and the next create is admitted")
	})

	It("admits a create retried under its name after a later step refused it, within the window, and still refuses another name", func() {
		t, l := leased(2)
		quota, observed := instanceQuota(t.Namespace)
		Eventually(observed).Should(Equal("1"))
		Expect(t.Client.Create(ctx, instance(l, "r1"))).To(Succeed())
		err := t.Client.Create(ctx, instance(l, "r2"))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the quota refuses after the webhook: %v", err)
		Expect(reserved(l)).To(ContainElement("r2"))

		Expect(admin.Patch(ctx, quota, client.RawPatch(types.MergePatchType,
			[]byte(`{"spec":{"hard":{"count/macosinstances.compute.macrack.io":"2"}}}`)))).To(Succeed())
		Eventually(observed).Should(Equal("2"))
		By("another name is refused while r2's reservation counts (the control)")
		err = t.Client.Create(ctx, instance(l, "r3"))
		harness.ExpectWebhookDenial(err, webhook, "instance.cap")
		Expect(err.Error()).To(ContainSubstring("r2 (admitted, not stored yet)"))
		By("r2 retried replaces its own reservation and is admitted, with no clock step")
		r2 := instance(l, "r2")
		Expect(t.Client.Create(ctx, r2)).To(Succeed())
		for _, r := range lease(l).Status.Reservations {
			if r.Name == "r2" {
				Expect(r.UID).To(Equal(string(r2.UID)), "r2's first try is no longer reserved; only the stored r2's may remain")
			}
		}
		err = t.Client.Create(ctx, instance(l, "r3"))
		harness.ExpectWebhookDenial(err, webhook, "instance.cap")
	})

	It("refuses a write of a lease's reservations by its tenant and by an agent (RBAC), and by any other identity RBAC lets through (the webhook)", func() {
		t, l := leased(2)
		Expect(t.Client.Create(ctx, instance(l, "held"))).To(Succeed())
		forged := func(c client.Client) error {
			raw, err := json.Marshal(map[string]any{"status": map[string]any{"reservations": []map[string]any{
				{"uid": "forged", "name": "ghost", "at": "2026-06-01T12:00:00Z"}}}})
			Expect(err).NotTo(HaveOccurred())
			return c.Status().Patch(ctx, lease(l), client.RawPatch(types.MergePatchType, raw))
		}
		harness.ExpectRBACDenial(forged(t.Client), "patch", "macnodeleases/status")

		agent, err := env.ClientAsServiceAccount(harness.AgentsNamespace, "agent-"+lease(l).Status.NodeName)
		Expect(err).NotTo(HaveOccurred())
		harness.ExpectRBACDenial(forged(agent), "patch", "macnodeleases/status")

		By("a ServiceAccount a careless administrator let write lease status")
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "careless", Namespace: t.Namespace}}
		Expect(admin.Create(ctx, sa)).To(Succeed())
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "lease-status", Namespace: t.Namespace},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"leasing.macrack.io"}, Resources: []string{"macnodeleases/status"}, Verbs: []string{"get", "patch"}}}}
		Expect(admin.Create(ctx, role)).To(Succeed())
		Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "lease-status", Namespace: t.Namespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: t.Namespace}}})).To(Succeed())
		careless, err := env.ClientAsServiceAccount(t.Namespace, sa.Name)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error {
			return careless.Status().Patch(ctx, lease(l), client.RawPatch(types.MergePatchType, []byte(`{"status":{"observedGeneration":null}}`)))
		}).Should(Succeed(), "positive control: RBAC lets it write lease status, and the webhook lets other fields through")
		err = forged(careless)
		harness.ExpectWebhookDenial(err, "vmacnodelease.macrack.io", "instance.cap")
		Expect(err.Error()).To(ContainSubstring("only the operator's admission webhook writes status.reservations"))
		Expect(reserved(l)).NotTo(ContainElement("ghost"))
		// A list version from the future would stall every admission's list.
		err = careless.Status().Patch(ctx, lease(l), client.RawPatch(types.MergePatchType, []byte(`{"status":{"reservationsListVersion":"999999999"}}`)))
		harness.ExpectWebhookDenial(err, "vmacnodelease.macrack.io", "instance.cap")
		Expect(err.Error()).To(ContainSubstring("status.reservationsListVersion"))
		Expect(t.Client.Create(ctx, instance(l, "after"))).To(Succeed(), "admission still lists the lease's instances")
	})
})
