package hostile

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/audit/event"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// Round 3 of the review, section 2 ("specs that must not change once they
// count") and section 3's audit finalizer on MacNodes and MacOSImages.
// docs/compliance.md's hostile table lists these Its: each reads
// "<who> <does what>: <refused by layer | outcome>".
var _ = Describe("round 3: specs and labels that cannot change once they count", Ordered, ContinueOnFailure, func() {
	const class, bigger = "m4-hostile-specs", "m4-hostile-specs-big"
	var leased leasedChassis
	var owner enrolled

	BeforeAll(func() {
		for _, c := range []string{class, bigger} {
			_, err := harness.CreateClass(ctx, admin, c, 2)
			Expect(err).NotTo(HaveOccurred())
		}
		owner = enrollChassis(class)
		leased = leaseOne(class)
		Expect(leased.lease.Status.NodeName).To(Equal(owner.node))
	})

	schemaRefusal := func(err error, message string) {
		GinkgoHelper()
		Expect(err).To(HaveOccurred(), "the API server admitted it")
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want the schema's 422 Invalid, got %v", err)
		Expect(err.Error()).To(ContainSubstring(message))
		Expect(err.Error()).NotTo(ContainSubstring("ValidatingAdmissionPolicy"))
		Expect(err.Error()).NotTo(ContainSubstring("admission webhook"))
	}

	It("a tenant patches a placed instance's imageName to a missing image: refused by schema CEL", func() {
		inst := leased.inst.DeepCopy()
		err := leased.tenant.Client.Patch(ctx, inst, mergePatch(map[string]any{"spec": map[string]any{"imageName": "missing"}}))
		schemaRefusal(err, "spec is immutable once created")
		By("positive control: the tenant labels the same instance")
		Expect(leased.tenant.Client.Patch(ctx, leased.inst.DeepCopy(), mergePatch(map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"team": "ios"}}}))).To(Succeed())
	})

	It("a tenant resizes a placed instance to disk 1Ki, memory 4Ti, cpu 64: refused by schema CEL", func() {
		for _, spec := range []map[string]any{{"disk": "1Ki"}, {"memory": "4Ti"}, {"cpu": 64}, {"disk": "1Ki", "memory": "4Ti", "cpu": 64}} {
			err := leased.tenant.Client.Patch(ctx, leased.inst.DeepCopy(), mergePatch(map[string]any{"spec": spec}))
			schemaRefusal(err, "spec is immutable once created")
		}
		got := leased.inst.DeepCopy()
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(got), got)).To(Succeed())
		Expect(got.Spec.Disk.String()).To(Equal("100Gi"))
		Expect(got.Spec.CPU).To(Equal(int32(4)))
	})

	It("a tenant adds images to a bound lease that had none: refused by schema CEL", func() {
		Expect(leased.lease.Spec.Images).To(BeEmpty())
		err := leased.tenant.Client.Patch(ctx, leased.lease.DeepCopy(), mergePatch(map[string]any{"spec": map[string]any{"images": []any{"img"}}}))
		schemaRefusal(err, "images is immutable")
		By("positive control: the tenant lengthens the same lease")
		Expect(leased.tenant.Client.Patch(ctx, leased.lease.DeepCopy(), mergePatch(map[string]any{
			"spec": map[string]any{"minimumDuration": "48h"}}))).To(Succeed())
	})

	It("a tenant removes the images of its lease: refused by schema CEL", func() {
		t, err := env.NewTenant(ctx, "images")
		Expect(err).NotTo(HaveOccurred())
		l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "booked", Namespace: t.Namespace},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4-hostile-specs-none", MinimumDuration: "24h", Images: []string{"img"}}}
		Expect(t.Client.Create(ctx, l)).To(Succeed(), "positive control: a lease is created with images")
		for _, images := range []any{nil, []any{}, []any{"img", "img-r3"}} {
			err = t.Client.Patch(ctx, l.DeepCopy(), mergePatch(map[string]any{"spec": map[string]any{"images": images}}))
			schemaRefusal(err, "images is immutable")
		}
		Expect(t.Client.Delete(ctx, l)).To(Succeed())
	})

	It("an administrator changes a Leased MacNode's nodeClassName: refused by VAP (tenancy.class)", func() {
		mn := macNode(owner.node)
		Expect(mn.Status.Binding).NotTo(BeNil())
		err := admin.Patch(ctx, mn, mergePatch(map[string]any{"spec": map[string]any{"nodeClassName": bigger}}))
		harness.ExpectPolicyDenial(err, "tenancy.class")
		Expect(err.Error()).To(ContainSubstring("its nodeClassName stays " + class))
		By("positive control: the administrator reclassifies an unbound chassis")
		free := enrollChassis(class)
		Expect(admin.Patch(ctx, macNode(free.node), mergePatch(map[string]any{"spec": map[string]any{"nodeClassName": bigger}}))).To(Succeed())
		Eventually(func() string {
			n := &corev1.Node{}
			Expect(admin.Get(ctx, client.ObjectKey{Name: free.node}, n)).To(Succeed())
			return n.Labels[fleetv1alpha1.ClassLabel]
		}).Should(Equal(bigger), "the operator relabels the Node with its new class")
	})

	It("a compromised agent registers its Node with another chassis' serial and class labels: refused by VAP (agent.scope)", func() {
		serial := harness.NewSerial()
		_, err := enroll.Enroll(ctx, admin, env.Config, enroll.Options{Serial: serial, Class: class,
			AgentsNamespace: agentsNamespace, TokenTTL: time.Hour})
		Expect(err).NotTo(HaveOccurred())
		name := enroll.NodeName(serial)
		agent := serviceAccountClient(agentsNamespace, host.ServiceAccountName(name))
		forged := func() *corev1.Node {
			return &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
					fleetv1alpha1.SerialLabel: macNode(owner.node).Spec.Serial, fleetv1alpha1.ClassLabel: bigger}},
				Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: host.UnleasedKey, Effect: corev1.TaintEffectNoSchedule}}},
			}
		}
		Eventually(func() error { return agent.Create(ctx, forged()) }).Should(MatchError(ContainSubstring("macrack-agent-scope")))
		harness.ExpectPolicyDenial(agent.Create(ctx, forged()), "agent.scope")
		By("positive control: the agent registers without them, and the operator writes its labels")
		Eventually(func() error { _, err := host.Register(ctx, agent, name, 0); return err }).Should(Succeed())
		Eventually(func() map[string]string {
			n := &corev1.Node{}
			Expect(admin.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
			return n.Labels
		}).Should(And(HaveKeyWithValue(fleetv1alpha1.SerialLabel, serial), HaveKeyWithValue(fleetv1alpha1.ClassLabel, class)))
	})

	It("a compromised agent relabels its registered Node as another chassis: refused by VAP (agent.scope)", func() {
		n := &corev1.Node{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: owner.node}, n)).To(Succeed())
		Expect(n.Labels).To(HaveKeyWithValue(fleetv1alpha1.SerialLabel, macNode(owner.node).Spec.Serial), "the operator labelled it")
		for _, label := range []map[string]any{
			{fleetv1alpha1.SerialLabel: "C02OTHER0001"},
			{fleetv1alpha1.ClassLabel: bigger},
			{fleetv1alpha1.SerialLabel: nil},
			{"macrack.io/anything": "x"},
		} {
			err := owner.client.Patch(ctx, n.DeepCopy(), mergePatch(map[string]any{"metadata": map[string]any{"labels": label}}))
			harness.ExpectPolicyDenial(err, "agent.scope")
		}
		By("positive control: the agent sets a label of another prefix")
		Expect(owner.client.Patch(ctx, n.DeepCopy(), mergePatch(map[string]any{"metadata": map[string]any{
			"labels": map[string]any{"example.com/rack": "r12"}}}))).To(Succeed())
	})

	It("an administrator deletes a MacNode while the audit sink is down: it stays until its records are exported", func() {
		serial := harness.NewSerial()
		mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: strings.ToLower(serial)},
			Spec: fleetv1alpha1.MacNodeSpec{Serial: serial, NodeClassName: class}}
		Expect(admin.Create(ctx, mn)).To(Succeed())
		expectHeldForItsRecords(mn, fleetv1alpha1.AuditKindChassis)
	})

	It("an administrator deletes a MacOSImage while the audit sink is down: it stays until its records are exported", func() {
		Expect(env.CreateImage(ctx, admin, "img-r3", "60Gi")).To(Succeed())
		img := &fleetv1alpha1.MacOSImage{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: "img-r3"}, img)).To(Succeed())
		expectHeldForItsRecords(img, fleetv1alpha1.AuditKindImage)
	})

	It("an administrator strips macrack.io/audit from a MacNode: refused by VAP (audit.finalizer)", func() {
		mn := macNode(owner.node)
		Expect(mn.Finalizers).To(ContainElement(fleetv1alpha1.AuditFinalizer))
		err := admin.Patch(ctx, mn, mergePatch(map[string]any{"metadata": map[string]any{"finalizers": nil}}))
		harness.ExpectPolicyDenial(err, "audit.finalizer")
		By("positive control: the administrator labels the same MacNode")
		Expect(admin.Patch(ctx, macNode(owner.node), mergePatch(map[string]any{"metadata": map[string]any{
			"labels": map[string]any{"example.com/rack": "r12"}}}))).To(Succeed())
	})
})

// expectHeldForItsRecords deletes obj, which the exporter has taken in
// hand, while the stream is down, and holds that it stays; once the stream
// is back, its deleted record goes out and it goes.
func expectHeldForItsRecords(obj client.Object, kind string) {
	GinkgoHelper()
	key := client.ObjectKeyFromObject(obj)
	Eventually(func() []string {
		Expect(admin.Get(ctx, key, obj)).To(Succeed())
		return obj.GetFinalizers()
	}).Should(ContainElement(fleetv1alpha1.AuditFinalizer), "the exporter takes it in hand")
	deleted := event.DeletedID(kind, string(obj.GetUID()))
	stream.setDown(true)
	DeferCleanup(func() { stream.setDown(false) })
	Expect(admin.Delete(ctx, obj)).To(Succeed())
	Consistently(func() error { return admin.Get(ctx, key, obj) }, "1s").Should(Succeed(), "it stays while its records cannot be exported")
	Expect(stream.has(deleted)).To(BeFalse())
	stream.setDown(false)
	op.Step(time.Minute) // past the exporter's backoff, on the operator's clock
	Eventually(func() bool {
		return apierrors.IsNotFound(admin.Get(ctx, key, obj))
	}).Should(BeTrue(), "positive control: once the stream is back, it goes")
	Expect(stream.has(deleted)).To(BeTrue(), "its deleted record reached the stream")
}

// recordingSink is the hostile suite's audit stream: it keeps the ids it
// acknowledged, and refuses everything while down.
type recordingSink struct {
	mu   sync.Mutex
	down bool
	ids  []string
}

func (s *recordingSink) Publish(_ context.Context, ev cloudevents.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errors.New("the stream is down")
	}
	s.ids = append(s.ids, ev.ID())
	return nil
}

func (s *recordingSink) Close() error { return nil }

func (s *recordingSink) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func (s *recordingSink) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.ids, id)
}
