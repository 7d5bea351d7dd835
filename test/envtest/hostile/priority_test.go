package hostile

import (
	"net/http"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/admission"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// classified records the FlowSchema the API server's priority and fairness
// filter put the last request in: it says so in a response header, even
// on a request it then refuses.
type classified struct {
	mu         sync.Mutex
	flowSchema types.UID
	rt         http.RoundTripper
}

func (c *classified) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req)
	if err == nil {
		c.mu.Lock()
		c.flowSchema = types.UID(resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"))
		c.mu.Unlock()
	}
	return resp, err
}

func (c *classified) last() types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flowSchema
}

// classifiedAs is a client of user in groups that records how its requests
// were classified.
func classifiedAs(user string, groups ...string) (client.Client, *classified) {
	GinkgoHelper()
	cfg := env.ConfigAs(user, groups...)
	rec := &classified{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.rt = rt; return rec })
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c, rec
}

func serviceAccountClassified(name string) (client.Client, *classified) {
	GinkgoHelper()
	return classifiedAs("system:serviceaccount:"+agentsNamespace+":"+name,
		"system:serviceaccounts", "system:serviceaccounts:"+agentsNamespace)
}

var _ = Describe("MacRack's FlowSchemas", Ordered, ContinueOnFailure, func() {
	const class = "m4-hostile-priority"
	var (
		e  enrolled
		fs *flowcontrolv1.FlowSchema
	)
	flowSchema := func() (*flowcontrolv1.FlowSchema, error) {
		got := &flowcontrolv1.FlowSchema{}
		return got, admin.Get(ctx, client.ObjectKey{Name: admission.HeartbeatFlowSchemaName}, got)
	}

	BeforeAll(func() {
		_, err := harness.CreateClass(ctx, admin, class, 2)
		Expect(err).NotTo(HaveOccurred())
		e = enrollChassis(class)
		Eventually(func() error { var err error; fs, err = flowSchema(); return err }).Should(Succeed(), "the operator applied its FlowSchema")
		pl := &flowcontrolv1.PriorityLevelConfiguration{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: fs.Spec.PriorityLevelConfiguration.Name}, pl)).To(Succeed(),
			"the API server's suggested priority level %s exists", admission.HeartbeatPriorityLevel)
	})

	It("give the agents' heartbeats the kubelets' priority level, and not the agent's other writes or others' Leases", func() {
		agent, rec := serviceAccountClassified(host.ServiceAccountName(e.node))
		beat := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.node, Namespace: host.HeartbeatNamespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(e.node), RenewTime: ptr.To(metav1.NowMicro())}}
		err := agent.Create(ctx, beat)
		if apierrors.IsAlreadyExists(err) {
			Expect(agent.Get(ctx, client.ObjectKeyFromObject(beat), beat)).To(Succeed())
			Expect(rec.last()).To(Equal(fs.UID), "the heartbeat's read")
			beat.Spec.RenewTime = ptr.To(metav1.NowMicro())
			err = agent.Update(ctx, beat)
		}
		Expect(err).NotTo(HaveOccurred())
		Expect(rec.last()).To(Equal(fs.UID), "the heartbeat's write")
		beat.Spec.RenewTime = ptr.To(metav1.NowMicro())
		Expect(agent.Update(ctx, beat)).To(Succeed())
		Expect(rec.last()).To(Equal(fs.UID), "the next beat")

		By("positive control: the same agent's facts report is an ordinary ServiceAccount request")
		Expect(host.ReportFacts(ctx, agent, e.node, harness.GoodFacts())).To(Succeed())
		Expect(rec.last()).NotTo(Or(BeEmpty(), Equal(fs.UID)))

		By("a tenant's Lease, anywhere, is not")
		tenant, err := env.NewTenant(ctx, "priority-tenant")
		Expect(err).NotTo(HaveOccurred())
		tc, trec := classifiedAs(tenant.User)
		harness.ExpectRBACDenial(tc.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-", Namespace: host.HeartbeatNamespace}}),
			"create", "leases")
		Expect(trec.last()).NotTo(Or(BeEmpty(), Equal(fs.UID)))

		By("another ServiceAccount of the agents' namespace is classified as an agent; it holds the agents' roles, and agent.scope refuses it")
		stranger, srec := serviceAccountClassified("default")
		harness.ExpectPolicyDenial(stranger.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: enroll.NodeName(harness.NewSerial()), Namespace: host.HeartbeatNamespace}}),
			"agent.scope")
		Expect(srec.last()).To(Equal(fs.UID))
	})

	It("give the operator's own requests the controllers' priority level, and no one else's", func() {
		ofs := &flowcontrolv1.FlowSchema{}
		Eventually(func() error { return admin.Get(ctx, client.ObjectKey{Name: admission.OperatorFlowSchemaName}, ofs) }).
			Should(Succeed(), "the operator applied its own FlowSchema")
		Expect(admin.Get(ctx, client.ObjectKey{Name: ofs.Spec.PriorityLevelConfiguration.Name}, &flowcontrolv1.PriorityLevelConfiguration{})).To(Succeed(),
			"the API server's suggested priority level %s exists", admission.OperatorPriorityLevel)
		saGroups := func(ns string) []string { return []string{"system:serviceaccounts", "system:serviceaccounts:" + ns} }

		// The in-process operator is in system:masters, which the API
		// server's exempt FlowSchema takes first; this is its identity as
		// a Deployment's ServiceAccount has it, without that group.
		operator, orec := classifiedAs(harness.OperatorUser, saGroups(harness.OperatorNamespace)...)
		Expect(operator.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(host.HeartbeatNamespace))).To(Or(Succeed(), Satisfy(apierrors.IsForbidden)))
		Expect(orec.last()).To(Equal(ofs.UID), "the operator's read")
		Expect(operator.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{GenerateName: "op-", Namespace: harness.OperatorNamespace}})).
			To(Or(Succeed(), Satisfy(apierrors.IsForbidden)))
		Expect(orec.last()).To(Equal(ofs.UID), "the operator's write")

		By("another ServiceAccount of the operator's namespace is an ordinary ServiceAccount request")
		other, srec := classifiedAs("system:serviceaccount:"+harness.OperatorNamespace+":default", saGroups(harness.OperatorNamespace)...)
		_ = other.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(host.HeartbeatNamespace))
		Expect(srec.last()).NotTo(Or(BeEmpty(), Equal(ofs.UID)))

		By("so is a ServiceAccount of the operator's name in a tenant's namespace, and a tenant")
		tenant, err := env.NewTenant(ctx, "priority-operator-tenant")
		Expect(err).NotTo(HaveOccurred())
		namesake, nrec := classifiedAs("system:serviceaccount:"+tenant.Namespace+":"+operatorServiceAccount, saGroups(tenant.Namespace)...)
		_ = namesake.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(tenant.Namespace))
		Expect(nrec.last()).NotTo(Or(BeEmpty(), Equal(ofs.UID)))
		tc, trec := classifiedAs(tenant.User)
		_ = tc.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(tenant.Namespace))
		Expect(trec.last()).NotTo(Or(BeEmpty(), Equal(ofs.UID)))

		By("and an agent's status write stays in the agents' queue")
		agent, arec := serviceAccountClassified(host.ServiceAccountName(e.node))
		Expect(host.ReportFacts(ctx, agent, e.node, harness.GoodFacts())).To(Succeed())
		Expect(arec.last()).NotTo(Or(BeEmpty(), Equal(ofs.UID), Equal(fs.UID)))
	})

	It("give the webhook's own requests a priority level of their own, and nothing else the operator sends", func() {
		afs, ofs := &flowcontrolv1.FlowSchema{}, &flowcontrolv1.FlowSchema{}
		Eventually(func() error { return admin.Get(ctx, client.ObjectKey{Name: admission.OperatorFlowSchemaName}, ofs) }).Should(Succeed())
		Eventually(func() error { return admin.Get(ctx, client.ObjectKey{Name: admission.AdmissionFlowSchemaName}, afs) }).
			Should(Succeed(), "the operator applied the webhook's FlowSchema")
		pl := &flowcontrolv1.PriorityLevelConfiguration{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: afs.Spec.PriorityLevelConfiguration.Name}, pl)).To(Succeed(),
			"the operator applied the webhook's priority level %s", admission.AdmissionPriorityLevel)
		Expect(pl.Spec.Limited).NotTo(BeNil())
		Expect(pl.Spec.Limited.LendablePercent).To(HaveValue(BeZero()), "it lends none of its seats")
		Eventually(func() (flowcontrolv1.ConditionStatus, error) {
			err := admin.Get(ctx, client.ObjectKeyFromObject(afs), afs)
			for _, c := range afs.Status.Conditions {
				if c.Type == flowcontrolv1.FlowSchemaConditionDangling {
					return c.Status, err
				}
			}
			return "", err
		}, 10*time.Second).Should(Equal(flowcontrolv1.ConditionFalse), "the API server found its priority level")

		tenant, err := env.NewTenant(ctx, "priority-admission-tenant")
		Expect(err).NotTo(HaveOccurred())
		lease := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Namespace: tenant.Namespace, Name: "l-none"}}
		// The operator's identity as a Deployment's ServiceAccount has it
		// (see above). Whether each request is then allowed or found does
		// not matter: it was classified first.
		operator, orec := classifiedAs(harness.OperatorUser, "system:serviceaccounts", "system:serviceaccounts:"+harness.OperatorNamespace)
		webhookSends := []struct {
			what string
			send func() error
		}{
			{"a lease read by name", func() error { return operator.Get(ctx, client.ObjectKeyFromObject(lease), lease) }},
			{"a MacNode read by name", func() error { return operator.Get(ctx, client.ObjectKey{Name: e.node}, &fleetv1alpha1.MacNode{}) }},
			{"a class read by name", func() error { return operator.Get(ctx, client.ObjectKey{Name: class}, &fleetv1alpha1.MacNodeClass{}) }},
			{"an image read by name", func() error { return operator.Get(ctx, client.ObjectKey{Name: "none"}, &fleetv1alpha1.MacOSImage{}) }},
			{"one namespace's instances listed", func() error {
				return operator.List(ctx, &computev1alpha1.MacOSInstanceList{}, client.InNamespace(tenant.Namespace))
			}},
			{"a reservation's status update", func() error { return operator.Status().Update(ctx, lease) }},
			{"a SubjectAccessReview", func() error {
				return operator.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: tenant.User, ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: tenant.Namespace, Verb: "get", Resource: "secrets"}}})
			}},
		}
		for _, r := range webhookSends {
			_ = r.send()
			Expect(orec.last()).To(Equal(afs.UID), r.what)
		}

		By("positive control: the operator's controllers' requests stay in its own FlowSchema")
		controllersSend := []struct {
			what string
			send func() error
		}{
			{"every namespace's instances listed, as an informer does", func() error {
				return operator.List(ctx, &computev1alpha1.MacOSInstanceList{})
			}},
			{"a namespace's leases listed", func() error {
				return operator.List(ctx, &leasingv1alpha1.MacNodeLeaseList{}, client.InNamespace(tenant.Namespace))
			}},
			{"a lease's status patch", func() error {
				return operator.Status().Patch(ctx, lease, client.RawPatch(types.MergePatchType, []byte(`{"status":{}}`)))
			}},
			{"a MacNode's status patch", func() error {
				return operator.Status().Patch(ctx, &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: e.node}},
					client.RawPatch(types.MergePatchType, []byte(`{"status":{}}`)))
			}},
		}
		for _, r := range controllersSend {
			_ = r.send()
			Expect(orec.last()).To(Equal(ofs.UID), r.what)
		}

		By("and no one else's requests: a tenant's read of a lease, an agent's read of its MacNode")
		tc, trec := classifiedAs(tenant.User)
		_ = tc.Get(ctx, client.ObjectKeyFromObject(lease), lease)
		Expect(trec.last()).NotTo(Or(BeEmpty(), Equal(afs.UID)))
		agent, arec := serviceAccountClassified(host.ServiceAccountName(e.node))
		_ = agent.Get(ctx, client.ObjectKey{Name: e.node}, &fleetv1alpha1.MacNode{})
		Expect(arec.last()).NotTo(Or(BeEmpty(), Equal(afs.UID)))
	})

	It("are restored by the operator within 10 s when deleted or edited", func() {
		for _, want := range []*flowcontrolv1.FlowSchema{admission.HeartbeatFlowSchema(agentsNamespace), admission.OperatorFlowSchema(harness.OperatorUser),
			admission.AdmissionFlowSchema(harness.OperatorUser)} {
			By(want.Name)
			get := func() (*flowcontrolv1.FlowSchema, error) {
				got := &flowcontrolv1.FlowSchema{}
				return got, admin.Get(ctx, client.ObjectKey{Name: want.Name}, got)
			}
			old, err := get()
			Expect(err).NotTo(HaveOccurred())
			Expect(admin.Delete(ctx, old)).To(Succeed())
			Eventually(func() (types.UID, error) { got, err := get(); return got.UID, err }, 10*time.Second).
				ShouldNot(Or(BeEmpty(), Equal(old.UID)))
			got, err := get()
			Expect(err).NotTo(HaveOccurred())
			Expect(admin.Patch(ctx, got, mergePatch(map[string]any{"spec": map[string]any{"matchingPrecedence": 9999}}))).To(Succeed())
			Eventually(func() (int32, error) { got, err := get(); return got.Spec.MatchingPrecedence, err }, 10*time.Second).
				Should(Equal(want.Spec.MatchingPrecedence))
		}

		By("the webhook's priority level")
		want := admission.AdmissionPriorityLevelConfiguration()
		get := func() (*flowcontrolv1.PriorityLevelConfiguration, error) {
			got := &flowcontrolv1.PriorityLevelConfiguration{}
			return got, admin.Get(ctx, client.ObjectKey{Name: want.Name}, got)
		}
		old, err := get()
		Expect(err).NotTo(HaveOccurred())
		Expect(admin.Delete(ctx, old)).To(Succeed())
		Eventually(func() (types.UID, error) { got, err := get(); return got.UID, err }, 10*time.Second).
			ShouldNot(Or(BeEmpty(), Equal(old.UID)))
		got, err := get()
		Expect(err).NotTo(HaveOccurred())
		Expect(admin.Patch(ctx, got, mergePatch(map[string]any{"spec": map[string]any{"limited": map[string]any{"lendablePercent": 100}}}))).To(Succeed())
		Eventually(func() (*int32, error) { got, err := get(); return got.Spec.Limited.LendablePercent, err }, 10*time.Second).
			Should(HaveValue(Equal(*want.Spec.Limited.LendablePercent)))
	})
})
