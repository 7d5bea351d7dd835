package vap

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// quota.never-circumvent's matchConditions keep the policy off the writes it
// cannot refuse: every other Node's status, the MacNodes' status writes that
// do not enter service. The replay above proves that every write the rule
// refuses is still refused; this proves the narrowing itself, with a probe:
// a copy of the shipped policy's match (constraints and conditions) whose one
// validation refuses everything, bound to labelled objects only. What the
// probe refuses, the shipped policy evaluates; what it admits, it skips.
var _ = Describe("quota.never-circumvent's match conditions", Ordered, func() {
	const (
		probeLabel = "macrack.io/probe"
		probeValue = "quota-match"
		probeMsg   = "probe: quota.never-circumvent evaluates this write"
	)
	labels := map[string]string{probeLabel: probeValue}

	BeforeAll(func() {
		aps, err := engine.AdmissionPolicies(params)
		Expect(err).NotTo(HaveOccurred())
		var shipped *admissionregistrationv1.ValidatingAdmissionPolicy
		for _, ap := range aps {
			if ap.Rule == "quota.never-circumvent" {
				shipped = ap.Policy
			}
		}
		Expect(shipped).NotTo(BeNil())
		Expect(shipped.Spec.MatchConditions).NotTo(BeEmpty(), "the shipped policy has no match condition to probe")
		probe := &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "probe-quota-match"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
				MatchConstraints: shipped.Spec.MatchConstraints.DeepCopy(),
				MatchConditions:  shipped.Spec.MatchConditions,
				Validations:      []admissionregistrationv1.Validation{{Expression: "false", Message: probeMsg}},
			},
		}
		Expect(admin.Create(ctx, probe)).To(Succeed())
		Expect(admin.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "probe-quota-match"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        probe.Name,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
				MatchResources:    &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: labels}},
			},
		})).To(Succeed())
		DeferCleanup(func() {
			_ = admin.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "probe-quota-match"}})
			_ = admin.Delete(ctx, probe)
		})
	})

	It("evaluates every class write: vmCapacity is required", func() {
		// Positive control, and the wait for the API server to load the probe.
		Eventually(func() error {
			return admin.Create(ctx, &fleetv1alpha1.MacNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "probe-two", Labels: labels},
				Spec: fleetv1alpha1.MacNodeClassSpec{Chip: "M4", Memory: resource.MustParse("16Gi"),
					Disk: resource.MustParse("1T"), NetworkGbps: 10, VMCapacity: 2}})
		}).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring(probeMsg)))
	})

	It("evaluates a Node that advertises macOS VMs, and skips every other Node's writes and status", func() {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "probe-linux-node", Labels: labels},
			Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}}}
		Expect(admin.Create(ctx, node)).To(Succeed())
		DeferCleanup(func() { _ = admin.Delete(ctx, node) })
		node.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("7")}
		Expect(admin.Status().Update(ctx, node)).To(Succeed())

		// Positive controls: the same status write advertising the resource,
		// as capacity or as allocatable, is evaluated (and the shipped policy
		// admits 2, so only the probe refuses).
		vm := corev1.ResourceName("macrack.io/macos-vm")
		withCapacity := node.DeepCopy()
		withCapacity.Status.Capacity[vm] = resource.MustParse("2")
		Expect(admin.Status().Update(ctx, withCapacity)).To(MatchError(ContainSubstring(probeMsg)))
		withAllocatable := node.DeepCopy()
		withAllocatable.Status.Allocatable[vm] = resource.MustParse("2")
		Expect(admin.Status().Update(ctx, withAllocatable)).To(MatchError(ContainSubstring(probeMsg)))
		mac := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "probe-mac-node", Labels: labels},
			Status: corev1.NodeStatus{Capacity: corev1.ResourceList{vm: resource.MustParse("2")}}}
		Expect(admin.Create(ctx, mac)).To(MatchError(ContainSubstring(probeMsg)))
	})

	It("evaluates a MacNode entering service, and skips its other writes", func() {
		class, err := harness.CreateClass(ctx, admin, "probe-class", 2)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = admin.Delete(ctx, class) })
		macNode := func(l map[string]string) *fleetv1alpha1.MacNode {
			serial := harness.NewSerial()
			mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: strings.ToLower(serial), Labels: l},
				Spec: fleetv1alpha1.MacNodeSpec{Serial: serial, NodeClassName: class.Name}}
			Expect(admin.Create(ctx, mn)).To(Succeed())
			DeferCleanup(func() { _ = admin.Delete(ctx, mn) })
			// The agent's report.
			mn.Status.Phase = fleetv1alpha1.MacNodeEnrolled
			mn.Status.Reported = harness.GoodFacts()
			Expect(admin.Status().Update(ctx, mn)).To(Succeed())
			return mn
		}

		// Positive control: Enrolled to Ready enters service, and is evaluated.
		probed := macNode(labels)
		probed.Status.Phase = fleetv1alpha1.MacNodeReady
		Expect(admin.Status().Update(ctx, probed)).To(MatchError(ContainSubstring(probeMsg)))

		// A chassis already in service (Ready before the probe saw it: the
		// shipped policy admitted it, SIP on): labelling it, Ready to Leased,
		// and its reports while Leased, are all skipped.
		mn := macNode(nil)
		mn.Status.Phase = fleetv1alpha1.MacNodeReady
		Expect(admin.Status().Update(ctx, mn)).To(Succeed())
		mn.Labels = labels
		Expect(admin.Update(ctx, mn)).To(Succeed())
		mn.Status.Phase = fleetv1alpha1.MacNodeLeased
		Expect(admin.Status().Update(ctx, mn)).To(Succeed())
		mn.Status.Reported.MacOSVersion = "15.6"
		Expect(admin.Status().Update(ctx, mn)).To(Succeed())
	})
})
