package hostile

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var _ = Describe("identities", Ordered, ContinueOnFailure, func() {
	const class = "m4-hostile-identities"
	var a, b enrolled
	var leased leasedChassis
	var owner enrolled
	var stranger client.Client

	BeforeAll(func() {
		_, err := harness.CreateClass(ctx, admin, class, 2)
		Expect(err).NotTo(HaveOccurred())
		Expect(client.IgnoreAlreadyExists(admin.Create(ctx, &corev1.ServiceAccount{
			ObjectMeta: metav1.ObjectMeta{Name: operatorServiceAccount, Namespace: harness.OperatorNamespace}}))).To(Succeed())
		a, b = enrollChassis(class), enrollChassis(class)
		// The admission policies the operator applied are in force.
		Eventually(func() error { return host.ReportFacts(ctx, a.client, b.node, harness.GoodFacts()) }).
			Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy 'macrack-agent-scope'")))
		leased = leaseOne(class)
		owner = a
		if leased.lease.Status.NodeName == b.node {
			owner = b
		}
		// The real kube-controller-manager creates every namespace's
		// default ServiceAccount, as on any cluster.
		Eventually(func() error {
			return admin.Get(ctx, client.ObjectKey{Namespace: agentsNamespace, Name: "default"}, &corev1.ServiceAccount{})
		}).Should(Succeed())
		stranger = serviceAccountClient(agentsNamespace, "default")
	})

	Context("another ServiceAccount of the agents' namespace", func() {
		It("holds the agents' roles through the one group binding, and no per-agent binding is left", func() {
			crb := &rbacv1.ClusterRoleBinding{}
			Expect(admin.Get(ctx, client.ObjectKey{Name: enroll.GroupBindingName}, crb)).To(Succeed())
			Expect(crb.RoleRef.Name).To(Equal(enroll.AgentRole))
			Expect(crb.Subjects).To(ConsistOf(HaveField("Name", enroll.AgentsGroup(agentsNamespace))))
			all := &rbacv1.ClusterRoleBindingList{}
			Expect(admin.List(ctx, all)).To(Succeed())
			for _, b := range all.Items {
				Expect(b.Name).NotTo(HavePrefix(enroll.LegacyBindingPrefix), "a per-agent binding is left")
			}
			sa := &corev1.ServiceAccount{}
			Eventually(func() *bool {
				Expect(admin.Get(ctx, client.ObjectKey{Namespace: agentsNamespace, Name: "default"}, sa)).To(Succeed())
				return sa.AutomountServiceAccountToken
			}).Should(HaveValue(BeFalse()), "the operator turns off the default ServiceAccount's token automount")
		})

		It("can write nothing and request no token: agent.scope refuses what RBAC grants the namespace, RBAC the rest", func() {
			for _, at := range attacks() {
				By(at.name)
				if at.outside {
					harness.ExpectRBACDenial(at.do(stranger, leased), at.verb, at.resource)
					continue
				}
				// RBAC allows it, so the refusal below is the policy's.
				Expect(harness.WaitAllowed(ctx, stranger, resourceAttributes(at))).To(Succeed())
				harness.ExpectPolicyDenial(at.do(stranger, leased), "agent.scope")
			}
			self := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: agentsNamespace}}
			harness.ExpectPolicyDenial(stranger.SubResource("token").Create(ctx, self, tokenRequest(3600)), "agent.scope")
		})

		It("positive control: the chassis' own agent does its routine writes", func() {
			Expect(host.ReportFacts(ctx, owner.client, owner.node, harness.GoodFacts())).To(Succeed())
			own := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: host.ServiceAccountName(owner.node), Namespace: agentsNamespace}}
			Expect(owner.client.SubResource("token").Create(ctx, own, tokenRequest(3600))).To(Succeed())
			Expect(owner.client.Status().Patch(ctx, leased.inst.DeepCopy(), mergePatch(map[string]any{"status": map[string]any{
				"runtime": map[string]any{"phase": string(computev1alpha1.VMRunning)}}}))).To(Succeed())
		})

		It("is refused by agent.scope alone when an administrator grants it more", func() {
			// A careless administrator binds the agents' roles to the whole
			// namespace once more, and tokens for every ServiceAccount.
			group := rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + agentsNamespace}
			careless := []client.Object{
				&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "careless-agents"},
					RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "macrack-agent"},
					Subjects: []rbacv1.Subject{group}},
				&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "careless-agents", Namespace: agentsNamespace},
					RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "macrack-agent-token"},
					Subjects: []rbacv1.Subject{group}},
				&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "careless-tokens"},
					Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}}}},
				&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "careless-tokens"},
					RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "careless-tokens"},
					Subjects: []rbacv1.Subject{group}},
			}
			for _, o := range careless {
				Expect(admin.Create(ctx, o)).To(Succeed())
				DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, o))).To(Succeed()) })
			}
			for _, at := range attacks() {
				By(at.name)
				// RBAC now allows it, so the refusal below is the policy's.
				Expect(harness.WaitAllowed(ctx, stranger, resourceAttributes(at))).To(Succeed())
				harness.ExpectPolicyDenial(at.do(stranger, leased), "agent.scope")
			}
		})
	})

	Context("an agent's own tokens", func() {
		It("last at most 24h, for the API server's audiences only", func() {
			own := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: host.ServiceAccountName(a.node), Namespace: agentsNamespace}}
			Expect(a.client.SubResource("token").Create(ctx, own, tokenRequest(3600))).To(Succeed(), "positive control: 1h, the API server's audiences")
			Expect(a.client.SubResource("token").Create(ctx, own, tokenRequest(86400))).To(Succeed(), "positive control: 24h")
			harness.ExpectPolicyDenial(a.client.SubResource("token").Create(ctx, own, tokenRequest(8760*3600)), "agent.scope")
			harness.ExpectPolicyDenial(a.client.SubResource("token").Create(ctx, own, tokenRequest(86401)), "agent.scope")
			harness.ExpectPolicyDenial(a.client.SubResource("token").Create(ctx, own, tokenRequest(3600, "vault")), "agent.scope")
		})
	})

	Context("an agent's Events", func() {
		It("are written only about its own Node and MacNode, in the namespace of cluster-scoped objects' Events", func() {
			forged := &corev1.Event{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-", Namespace: leased.tenant.Namespace},
				InvolvedObject: corev1.ObjectReference{APIVersion: "leasing.macrack.io/v1alpha1", Kind: "MacNodeLease",
					Namespace: leased.tenant.Namespace, Name: leased.lease.Name, UID: leased.lease.UID},
				Reason: "LeaseReleased", Message: "released early", Type: corev1.EventTypeNormal,
				Source: corev1.EventSource{Component: "macrack-lease"},
			}
			harness.ExpectRBACDenial(owner.client.Create(ctx, forged), "create", "events")
			about := func(kind, name string) *corev1.Event {
				return &corev1.Event{
					ObjectMeta:     metav1.ObjectMeta{GenerateName: "agent-", Namespace: metav1.NamespaceDefault},
					InvolvedObject: corev1.ObjectReference{Kind: kind, Name: name},
					Reason:         "Reaped", Message: "stopped a VM that holds no slot", Type: corev1.EventTypeWarning,
					Source: corev1.EventSource{Component: "macrack-agent"},
				}
			}
			Expect(owner.client.Create(ctx, about("Node", owner.node))).To(Succeed(), "positive control: its own Node")
			Expect(owner.client.Create(ctx, about("MacNode", owner.node))).To(Succeed(), "positive control: its own MacNode")
			other := a
			if owner.node == a.node {
				other = b
			}
			harness.ExpectPolicyDenial(owner.client.Create(ctx, about("Node", other.node)), "agent.scope")
			harness.ExpectPolicyDenial(owner.client.Create(ctx, about("MacNodeLease", leased.lease.Name)), "agent.scope")
		})
	})

	Context("the policies' own objects", Ordered, func() {
		params := func() *corev1.ConfigMap {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: policy.ParamsConfigMapName, Namespace: harness.OperatorNamespace}}
		}

		It("are restored by the operator within 10 s when deleted or edited", func() {
			Eventually(func() error { return admin.Get(ctx, client.ObjectKeyFromObject(params()), params()) }).Should(Succeed())
			Expect(admin.Delete(ctx, params())).To(Succeed())
			Eventually(func() error { return admin.Get(ctx, client.ObjectKeyFromObject(params()), params()) }, 10*time.Second).Should(Succeed())

			vap := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "macrack-agent-scope"}}
			Expect(admin.Delete(ctx, vap)).To(Succeed())
			Eventually(func() error { return admin.Get(ctx, client.ObjectKeyFromObject(vap), vap) }, 10*time.Second).Should(Succeed())

			binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "macrack-agent-scope"}}
			Expect(admin.Delete(ctx, binding)).To(Succeed())
			Eventually(func() error { return admin.Get(ctx, client.ObjectKeyFromObject(binding), binding) }, 10*time.Second).Should(Succeed())

			Expect(admin.Get(ctx, client.ObjectKeyFromObject(vap), vap)).To(Succeed())
			want := vap.Spec.Validations[0].Expression
			Expect(admin.Patch(ctx, vap, mergePatch(map[string]any{"spec": map[string]any{"validations": []any{
				map[string]any{"expression": "true"}}}}))).To(Succeed())
			Eventually(func() string {
				Expect(admin.Get(ctx, client.ObjectKeyFromObject(vap), vap)).To(Succeed())
				return vap.Spec.Validations[0].Expression
			}, 10*time.Second).Should(Equal(want))
		})

		It("when missing, block no one but agents", func() {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: owner.node}}
			untaint := mergePatch(map[string]any{"spec": map[string]any{"taints": []any{}}})

			other := b
			if owner.node == b.node {
				other = a
			}
			foreignBeat := func() *coordinationv1.Lease {
				return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: other.node, Namespace: host.HeartbeatNamespace},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(other.node)}}
			}
			// A binding the operator has just restored (the test before
			// deletes it) reaches the API server's admission within about a
			// second, when its policy cache next compiles; and the agents'
			// roles, which the operator takes back while the binding is
			// gone, come back after it, the ClusterRoleBinding first and the
			// heartbeat namespace's RoleBinding next: wait for all of them,
			// so that what follows is refused by the policy, not by RBAC.
			Eventually(func(g Gomega) {
				err := owner.client.Patch(ctx, n, untaint)
				g.Expect(err).To(HaveOccurred())
				g.Expect(err.Error()).To(ContainSubstring("ValidatingAdmissionPolicy 'macrack-agent-scope'"))
				err = owner.client.Create(ctx, foreignBeat())
				g.Expect(err).To(HaveOccurred())
				g.Expect(err.Error()).To(ContainSubstring("ValidatingAdmissionPolicy 'macrack-agent-scope'"))
			}, 10*time.Second).Should(Succeed())

			// The operator is gone (uninstalled, or down) and its params
			// with it.
			Expect(op.Stop()).To(Succeed())
			op = nil
			Expect(admin.Delete(ctx, params())).To(Succeed())

			By("an administrator labels a Node, creates a Lease in kube-system and a token")
			plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "plain-"}}
			Expect(admin.Create(ctx, plain)).To(Succeed())
			Expect(admin.Patch(ctx, plain, mergePatch(map[string]any{"metadata": map[string]any{"labels": map[string]any{"team": "infra"}}}))).To(Succeed())
			Expect(admin.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{GenerateName: "leader-", Namespace: "kube-system"},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("kube-scheduler")}})).To(Succeed())
			Eventually(func() error {
				return admin.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "default"}, &corev1.ServiceAccount{})
			}).Should(Succeed())
			Expect(admin.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "kube-system"}},
				&authenticationv1.TokenRequest{})).To(Succeed())

			By("an agent stays fenced")
			harness.ExpectPolicyDenial(owner.client.Patch(ctx, n, untaint), "agent.scope")
			harness.ExpectPolicyDenial(owner.client.Create(ctx, foreignBeat()), "agent.scope")

			By("the operator, back, restores its params within 10 s")
			op = startOperator()
			Eventually(func() error { return admin.Get(ctx, client.ObjectKeyFromObject(params()), params()) }, 10*time.Second).Should(Succeed())
		})
	})
})

// resourceAttributes is what RBAC checks for an attack.
func resourceAttributes(at attack) authorizationv1.ResourceAttributes {
	attrs := authorizationv1.ResourceAttributes{Verb: at.verb, Namespace: at.namespace}
	switch at.resource {
	case "serviceaccounts/token":
		attrs.Resource, attrs.Subresource = "serviceaccounts", "token"
	case "nodes":
		attrs.Resource = "nodes"
	case "macnodes/status":
		attrs.Group, attrs.Resource, attrs.Subresource = "fleet.macrack.io", "macnodes", "status"
	case "macosinstances/status":
		attrs.Group, attrs.Resource, attrs.Subresource = "compute.macrack.io", "macosinstances", "status"
	}
	return attrs
}
