package agents

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// agentClient impersonates the host agent of node, as its ServiceAccount,
// which holds the agents' roles through the group bindings the operator
// writes once agent.scope is in force.
func agentClient(node string) client.Client {
	GinkgoHelper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: host.ServiceAccountName(node), Namespace: agentsNamespace}}
	Expect(client.IgnoreAlreadyExists(admin.Create(ctx, sa))).To(Succeed())
	c, err := env.ClientAsServiceAccount(agentsNamespace, sa.Name)
	Expect(err).NotTo(HaveOccurred())
	Expect(harness.WaitAllowed(ctx, c, authorizationv1.ResourceAttributes{Verb: "create", Namespace: host.HeartbeatNamespace,
		Group: "coordination.k8s.io", Resource: "leases"})).To(Succeed())
	return c
}

func statusPatch(c client.Client, obj client.Object, patch map[string]any) error {
	raw, err := json.Marshal(patch)
	Expect(err).NotTo(HaveOccurred())
	return c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, raw))
}

var _ = Describe("agent.scope", Ordered, func() {
	var nodeA, nodeB string
	var a client.Client
	var instA, instB *computev1alpha1.MacOSInstance

	BeforeAll(func() {
		class := "m4-agents"
		_, err := harness.CreateClass(ctx, admin, class, 2)
		Expect(err).NotTo(HaveOccurred())
		Expect(env.CreateImage(ctx, admin, "img", "60Gi")).To(Succeed())
		for _, n := range []*string{&nodeA, &nodeB} {
			serial := harness.NewSerial()
			*n = strings.ToLower(serial)
			// A is enrolled with an address, which the operator publishes.
			address := ""
			if n == &nodeA {
				address = "127.0.0.42"
			}
			Expect(admin.Create(ctx, &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: *n},
				Spec: fleetv1alpha1.MacNodeSpec{Serial: serial, NodeClassName: class, Address: address}})).To(Succeed())
		}
		a = agentClient(nodeA)
		b := agentClient(nodeB)
		// The VAPs load asynchronously: wait until agent.scope bites.
		Eventually(func() error {
			return host.ReportFacts(ctx, a, nodeB, harness.GoodFacts())
		}).Should(MatchError(ContainSubstring("agent.scope")))

		// Each agent registers its Node and reports its facts; the operator
		// makes both chassis Ready.
		for _, x := range []struct {
			c    client.Client
			node string
		}{{a, nodeA}, {b, nodeB}} {
			_, err := host.Register(ctx, x.c, x.node, 0)
			Expect(err).NotTo(HaveOccurred(), "positive control: registration")
			n := &corev1.Node{}
			Expect(admin.Get(ctx, client.ObjectKey{Name: x.node}, n)).To(Succeed())
			// The API server itself adds node.kubernetes.io/not-ready.
			var mine []string
			for _, t := range n.Spec.Taints {
				if strings.HasPrefix(t.Key, "macrack.io/") {
					mine = append(mine, t.Key)
				}
			}
			Expect(mine).To(ConsistOf(host.UnleasedKey))
			Expect(n.Status.Capacity.Name(host.VMResource, resource.DecimalSI).Value()).To(Equal(int64(2)))
			Expect(host.ReportFacts(ctx, x.c, x.node, harness.GoodFacts())).To(Succeed(), "positive control: its own facts")
			Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(x.node).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeReady))
		}

		// Two tenants lease both chassis and start one instance each; the
		// operator places them.
		byNode := map[string]*computev1alpha1.MacOSInstance{}
		for i := 0; i < 2; i++ {
			t, err := env.NewTenant(ctx, fmt.Sprintf("tenant%d", i))
			Expect(err).NotTo(HaveOccurred())
			l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: t.Namespace},
				Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h"}}
			Expect(t.Client.Create(ctx, l)).To(Succeed())
			Eventually(func() string {
				Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), l)).To(Succeed())
				return string(l.Status.Phase)
			}).Should(Equal("Bound"))
			inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "ci", Namespace: t.Namespace},
				Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "l", ImageName: "img", CPU: 4,
					Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("100Gi")}}
			Eventually(func() error { return t.Client.Create(ctx, inst) }).Should(Succeed())
			Eventually(func() string {
				Expect(admin.Get(ctx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
				return inst.Status.NodeName
			}).Should(Equal(l.Status.NodeName))
			byNode[inst.Status.NodeName] = inst
		}
		instA, instB = byNode[nodeA], byNode[nodeB]
		Expect(instA).NotTo(BeNil())
		Expect(instB).NotTo(BeNil())
	})

	Context("on its Node", func() {
		It("adopts its existing Node, and may not create B's", func() {
			n := &corev1.Node{}
			Expect(admin.Get(ctx, client.ObjectKey{Name: nodeA}, n)).To(Succeed())
			_, err := host.Register(ctx, a, nodeA, 0)
			Expect(err).NotTo(HaveOccurred(), "an existing Node is adopted")
			again := &corev1.Node{}
			Expect(admin.Get(ctx, client.ObjectKey{Name: nodeA}, again)).To(Succeed())
			Expect(again.UID).To(Equal(n.UID), "adopted, not recreated")

			Expect(admin.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeB}})).To(Succeed())
			foreign := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeB}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: host.UnleasedKey, Effect: corev1.TaintEffectNoSchedule}}}}
			harness.ExpectPolicyDenial(a.Create(ctx, foreign), "agent.scope")
		})
		It("publishes its kubelet port, and may not point its Node's address elsewhere", func() {
			_, err := host.Register(ctx, a, nodeA, 10250)
			Expect(err).NotTo(HaveOccurred(), "positive control: the agent publishes its kubelet port")
			n := &corev1.Node{}
			Eventually(func() []corev1.NodeAddress {
				Expect(admin.Get(ctx, client.ObjectKey{Name: nodeA}, n)).To(Succeed())
				return n.Status.Addresses
			}).Should(Equal([]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.42"}}), "the operator publishes the enrolled address")
			Expect(n.Status.DaemonEndpoints.KubeletEndpoint.Port).To(Equal(int32(10250)))

			harness.ExpectPolicyDenial(statusPatch(a, n, map[string]any{"status": map[string]any{
				"addresses": []any{map[string]any{"type": "InternalIP", "address": "10.0.0.66"}}}}), "agent.scope")
			harness.ExpectPolicyDenial(statusPatch(a, n, map[string]any{"status": map[string]any{
				"addresses": []any{map[string]any{"type": "Hostname", "address": "evil.example.com"}, map[string]any{"type": "InternalIP", "address": "127.0.0.42"}}}}), "agent.scope")
			Expect(statusPatch(a, n, map[string]any{"status": map[string]any{
				"daemonEndpoints": map[string]any{"kubeletEndpoint": map[string]any{"Port": 10251}}}})).To(Succeed(), "positive control: its own port")
			Expect(admin.Get(ctx, client.ObjectKey{Name: nodeA}, n)).To(Succeed())
			Expect(n.Status.Addresses).To(Equal([]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.42"}}))

		})
		It("may not change a macrack.io taint or the tenant label, and may change a foreign taint", func() {
			n := &corev1.Node{}
			Expect(a.Get(ctx, client.ObjectKey{Name: nodeA}, n)).To(Succeed())
			n.Spec.Taints = nil
			harness.ExpectPolicyDenial(a.Update(ctx, n), "agent.scope")

			Expect(a.Get(ctx, client.ObjectKey{Name: nodeA}, n)).To(Succeed())
			n.Labels["macrack.io/tenant"] = "tenant-x"
			harness.ExpectPolicyDenial(a.Update(ctx, n), "agent.scope")

			Expect(a.Get(ctx, client.ObjectKey{Name: nodeA}, n)).To(Succeed())
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectPreferNoSchedule})
			Expect(a.Update(ctx, n)).To(Succeed(), "positive control: a foreign taint is not macrack.io's")
		})
		It("may not advertise three macOS VMs, and may advertise two", func() {
			n := &corev1.Node{}
			Expect(a.Get(ctx, client.ObjectKey{Name: nodeA}, n)).To(Succeed())
			three := n.DeepCopy()
			three.Status.Capacity[host.VMResource] = resource.MustParse("3")
			harness.ExpectPolicyDenial(a.Status().Patch(ctx, three, client.MergeFrom(n)), "quota.never-circumvent")
			Expect(a.Get(ctx, client.ObjectKey{Name: nodeA}, n)).To(Succeed())
			Expect(n.Status.Capacity.Name(host.VMResource, resource.DecimalSI).Value()).To(Equal(int64(2)))
		})
		It("may not change its Node's Ready condition, which the operator writes, and keeps its own facts", func() {
			n := &corev1.Node{}
			Expect(a.Get(ctx, client.ObjectKey{Name: nodeA}, n)).To(Succeed())
			// A strategic merge patch keyed by type touches the Ready
			// condition alone, whatever the operator wrote meanwhile.
			for _, status := range []string{"True", "False", "Unknown"} {
				patch := []byte(`{"status":{"conditions":[{"type":"Ready","status":"` + status + `","reason":"AgentSaysSo"}]}}`)
				err := a.Status().Patch(ctx, n, client.RawPatch(types.StrategicMergePatchType, patch))
				harness.ExpectPolicyDenial(err, "agent.scope")
				Expect(err.Error()).To(ContainSubstring("may not change its Node's Ready condition"))
			}
			Expect(statusPatch(a, n, map[string]any{"status": map[string]any{
				"daemonEndpoints": map[string]any{"kubeletEndpoint": map[string]any{"Port": 10252}}}})).To(Succeed(), "positive control: its own kubelet port")
			_, err := host.Register(ctx, a, nodeA, 10250)
			Expect(err).NotTo(HaveOccurred(), "positive control: the agent corrects its port and capacity beside the operator's Ready")
		})
		It("may not delete its Node", func() {
			harness.ExpectRBACDenial(a.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeA}}), "delete", "nodes")
		})
	})

	Context("on its MacNode", func() {
		It("patches its own status.reported", func() {
			Expect(host.ReportFacts(ctx, a, nodeA, harness.GoodFacts())).To(Succeed())
		})
		It("may not patch MacNode B", func() {
			harness.ExpectPolicyDenial(host.ReportFacts(ctx, a, nodeB, harness.GoodFacts()), "agent.scope")
		})
		It("may not write its own status.binding or status.slots", func() {
			harness.ExpectPolicyDenial(statusPatch(a, &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: nodeA}}, map[string]any{
				"status": map[string]any{"binding": map[string]any{"leaseNamespace": "x", "leaseName": "y", "leaseUID": "z",
					"boundAt": "2026-06-01T12:00:00Z", "earliestReleaseAt": "2026-06-02T12:00:00Z"}}}), "agent.scope")
			harness.ExpectPolicyDenial(statusPatch(a, &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: nodeA}}, map[string]any{
				"status": map[string]any{"slots": []any{map[string]any{"namespace": "x", "name": "y", "uid": "z"}}}}), "agent.scope")
		})
	})

	Context("on instances", func() {
		It("updates status.runtime of its own instance", func() {
			Expect(statusPatch(a, instA, map[string]any{"status": map[string]any{"runtime": map[string]any{"phase": "Running"}}})).To(Succeed())
		})
		It("may not update an instance on node B", func() {
			harness.ExpectPolicyDenial(statusPatch(a, instB, map[string]any{"status": map[string]any{"runtime": map[string]any{"phase": "Running"}}}), "agent.scope")
		})
		It("may not change the labels of its own instance (its spec the schema fixes for everyone)", func() {
			i := &computev1alpha1.MacOSInstance{}
			Expect(a.Get(ctx, client.ObjectKeyFromObject(instA), i)).To(Succeed())
			i.Labels = map[string]string{"example.com/owner": "agent"}
			harness.ExpectPolicyDenial(a.Update(ctx, i), "agent.scope")
		})
	})

	Context("on leases and tokens", func() {
		It("renews its own heartbeat Lease, and may not write B's", func() {
			hb := &host.Heartbeat{Client: a, NodeName: nodeA, Interval: 10 * time.Second, Clock: clock.RealClock{}}
			Expect(hb.Beat(ctx)).To(Succeed(), "positive control: create")
			Expect(hb.Beat(ctx)).To(Succeed(), "positive control: renew")
			foreign := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeB, Namespace: host.HeartbeatNamespace},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(nodeB)}}
			harness.ExpectPolicyDenial(a.Create(ctx, foreign), "agent.scope")
		})
		It("requests a token for itself, and may not for agent B", func() {
			own := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: host.ServiceAccountName(nodeA), Namespace: agentsNamespace}}
			Expect(a.SubResource("token").Create(ctx, own, &authenticationv1.TokenRequest{})).To(Succeed())
			other := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: host.ServiceAccountName(nodeB), Namespace: agentsNamespace}}
			harness.ExpectPolicyDenial(a.SubResource("token").Create(ctx, other, &authenticationv1.TokenRequest{}), "agent.scope")
		})
		It("may not create a ServiceAccount token Secret: RBAC refuses it before agent.scope", func() {
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "forged-token", Namespace: agentsNamespace,
				Annotations: map[string]string{corev1.ServiceAccountNameKey: host.ServiceAccountName(nodeA)}},
				Type: corev1.SecretTypeServiceAccountToken}
			harness.ExpectRBACDenial(a.Create(ctx, secret), "create", "secrets")
		})
		It("may not list MacNodeLeases", func() {
			harness.ExpectRBACDenial(a.List(ctx, &leasingv1alpha1.MacNodeLeaseList{}), "list", "macnodeleases")
		})
	})
})

func macNode(name string) *fleetv1alpha1.MacNode {
	GinkgoHelper()
	mn := &fleetv1alpha1.MacNode{}
	Expect(admin.Get(ctx, client.ObjectKey{Name: name}, mn)).To(Succeed())
	return mn
}
