package hostile

import (
	"encoding/json"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// serviceAccountClient impersonates ServiceAccount name of namespace.
func serviceAccountClient(namespace, name string) client.Client {
	GinkgoHelper()
	c, err := env.ClientAsServiceAccount(namespace, name)
	Expect(err).NotTo(HaveOccurred())
	return c
}

// enrolled is a chassis enrolled as `macrackctl node enroll` does it, with
// a client that acts as its agent.
type enrolled struct {
	node   string
	client client.Client
}

// enrollChassis enrolls a chassis of class, registers its Node and reports
// good facts as its agent, and waits until the operator makes it Ready.
func enrollChassis(class string) enrolled {
	GinkgoHelper()
	serial := harness.NewSerial()
	_, err := enroll.Enroll(ctx, admin, env.Config, enroll.Options{Serial: serial, Class: class,
		AgentsNamespace: agentsNamespace, TokenTTL: time.Hour})
	Expect(err).NotTo(HaveOccurred())
	e := enrolled{node: enroll.NodeName(serial), client: serviceAccountClient(agentsNamespace, host.ServiceAccountName(enroll.NodeName(serial)))}
	// The operator grants the agents' roles once agent.scope is in force, and
	// RBAC reads bindings from an informer: wait until they are.
	Eventually(func() error { _, err := host.Register(ctx, e.client, e.node, 0); return err }).Should(Succeed(),
		"positive control: the enrolled agent registers its Node")
	Eventually(func() error { return host.ReportFacts(ctx, e.client, e.node, harness.GoodFacts()) }).Should(Succeed(),
		"positive control: the enrolled agent reports its facts")
	Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(e.node).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeReady))
	return e
}

// leasedChassis is a tenant's Bound lease and one placed instance.
type leasedChassis struct {
	tenant *harness.Tenant
	lease  *leasingv1alpha1.MacNodeLease
	inst   *computev1alpha1.MacOSInstance
}

// leaseOne leases a chassis of class for a new tenant and places one
// instance on it.
func leaseOne(class string) leasedChassis {
	GinkgoHelper()
	t, err := env.NewTenant(ctx, "tenant")
	Expect(err).NotTo(HaveOccurred())
	l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: t.Namespace},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h"}}
	Expect(t.Client.Create(ctx, l)).To(Succeed())
	Eventually(func() leasingv1alpha1.MacNodeLeasePhase {
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), l)).To(Succeed())
		return l.Status.Phase
	}).Should(Equal(leasingv1alpha1.LeaseBound))
	inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "ci", Namespace: t.Namespace},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "l", ImageName: "img", CPU: 4,
			Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("100Gi")}}
	Eventually(func() error { return t.Client.Create(ctx, inst) }).Should(Succeed())
	Eventually(func() string {
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
		return inst.Status.NodeName
	}).Should(Equal(l.Status.NodeName))
	return leasedChassis{tenant: t, lease: l, inst: inst}
}

// patchFinalizers sets inst's finalizers, as c, to those it holds now
// less remove, plus add: a merge patch replaces the whole list, and the list
// is others' too (the operator's macrack.io/audit), so it is locked on the
// resourceVersion read, and read again on a conflict, as clients do.
func patchFinalizers(c client.Client, inst *computev1alpha1.MacOSInstance, add []string, remove ...string) error {
	GinkgoHelper()
	for {
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
		finalizers := []any{}
		for _, f := range inst.Finalizers {
			if !slices.Contains(remove, f) {
				finalizers = append(finalizers, f)
			}
		}
		for _, f := range add {
			if !slices.Contains(inst.Finalizers, f) {
				finalizers = append(finalizers, f)
			}
		}
		err := c.Patch(ctx, inst, mergePatch(map[string]any{"metadata": map[string]any{
			"resourceVersion": inst.ResourceVersion, "finalizers": finalizers}}))
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// takeInHand adds the agent's macrack.io/disk-wipe finalizer to inst, as
// e's agent does when the instance is placed on its chassis.
func takeInHand(e enrolled, inst *computev1alpha1.MacOSInstance) {
	GinkgoHelper()
	Expect(patchFinalizers(e.client, inst, []string{fleetv1alpha1.DiskWipeFinalizer})).To(Succeed(),
		"positive control: the agent takes the instance in hand")
}

// wipeAndLetGo does as e's agent does after a wipe: it records the wipe in
// status.runtime.wipedAt, then removes its macrack.io/disk-wipe finalizer,
// unless the instance carries no other finalizer but the audit exporter's,
// which then takes both off in one write (issue 39).
func wipeAndLetGo(e enrolled, inst *computev1alpha1.MacOSInstance) {
	GinkgoHelper()
	Expect(e.client.Status().Patch(ctx, inst, mergePatch(map[string]any{"status": map[string]any{
		"runtime": map[string]any{"phase": string(computev1alpha1.VMStopped), "wipedAt": time.Now().UTC().Format(time.RFC3339)}}}))).To(Succeed())
	leftToExporter := slices.Contains(inst.Finalizers, fleetv1alpha1.AuditFinalizer) &&
		!slices.ContainsFunc(inst.Finalizers, func(f string) bool {
			return f != fleetv1alpha1.AuditFinalizer && f != fleetv1alpha1.DiskWipeFinalizer
		})
	if !leftToExporter {
		Expect(patchFinalizers(e.client, inst, nil, fleetv1alpha1.DiskWipeFinalizer)).To(Succeed())
	}
}

func macNode(name string) *fleetv1alpha1.MacNode {
	GinkgoHelper()
	mn := &fleetv1alpha1.MacNode{}
	Expect(admin.Get(ctx, client.ObjectKey{Name: name}, mn)).To(Succeed())
	return mn
}

func mergePatch(patch map[string]any) client.Patch {
	GinkgoHelper()
	raw, err := json.Marshal(patch)
	Expect(err).NotTo(HaveOccurred())
	return client.RawPatch(types.MergePatchType, raw)
}

// writes are the attacks of the review on a leased chassis, as c.
type attack struct {
	name string
	// verb, resource and namespace name what RBAC checks.
	verb, resource, namespace string
	// outside: the attack writes outside what the agents' roles reach, so
	// RBAC refuses it even to an identity of the agents' namespace.
	outside bool
	do      func(c client.Client, target leasedChassis) error
}

func attacks() []attack {
	return []attack{
		{"mint a token for the operator's ServiceAccount", "create", "serviceaccounts/token", harness.OperatorNamespace, true, func(c client.Client, _ leasedChassis) error {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: operatorServiceAccount, Namespace: harness.OperatorNamespace}}
			return c.SubResource("token").Create(ctx, sa, tokenRequest(3600))
		}},
		{"mint a token for the leased chassis' agent", "create", "serviceaccounts/token", agentsNamespace, false, func(c client.Client, t leasedChassis) error {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: host.ServiceAccountName(t.lease.Status.NodeName), Namespace: agentsNamespace}}
			return c.SubResource("token").Create(ctx, sa, tokenRequest(3600))
		}},
		{"replace the leased Node's taints", "patch", "nodes", "", false, func(c client.Client, t leasedChassis) error {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: t.lease.Status.NodeName}}
			return c.Patch(ctx, n, mergePatch(map[string]any{"spec": map[string]any{"taints": []any{
				map[string]any{"key": host.UnleasedKey, "effect": "NoSchedule"}}}}))
		}},
		{"clear the leased MacNode's slots", "patch", "macnodes/status", "", false, func(c client.Client, t leasedChassis) error {
			mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: t.lease.Status.NodeName}}
			return c.Status().Patch(ctx, mn, mergePatch(map[string]any{"status": map[string]any{"slots": nil}}))
		}},
		{"stop the tenant's VM", "patch", "macosinstances/status", "", false, func(c client.Client, t leasedChassis) error {
			return c.Status().Patch(ctx, t.inst.DeepCopy(), mergePatch(map[string]any{"status": map[string]any{
				"runtime": map[string]any{"phase": string(computev1alpha1.VMStopped)}}}))
		}},
	}
}

// tokenRequest asks for a token of the API server's audiences (an empty
// list, which the API server fills) that lasts seconds.
func tokenRequest(seconds int64, audiences ...string) *authenticationv1.TokenRequest {
	return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: audiences, ExpirationSeconds: ptr.To(seconds)}}
}

// operatorServiceAccount is the operator's ServiceAccount, as an install
// creates it; an attacker with a token for it would be the operator.
const operatorServiceAccount = "macrack-operator"
