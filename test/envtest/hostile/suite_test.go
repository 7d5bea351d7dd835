// Package hostile attacks a running MacRack the way a review did: as a
// compromised host agent, as another ServiceAccount of the agents'
// namespace, as a tenant and as a careless administrator. It runs a real
// kube-apiserver and etcd, a real kube-controller-manager (the `default`
// ServiceAccount, garbage collection, namespace finalisation), the
// operator with its webhooks and the admission policies it applies itself.
// Every refusal asserts the layer that refused, beside a positive control.
package hostile

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

const agentsNamespace = harness.AgentsNamespace

var (
	env   *harness.Env
	op    *harness.Operator
	kcm   *harness.ControllerManager
	admin client.Client
	ctx   = context.Background()
	// stream is the operator's audit sink.
	stream = &recordingSink{}
)

func TestHostile(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	RunSpecs(t, "Hostile suite")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = harness.Start(harness.WithWebhooks)
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	kcm, err = env.StartControllerManager(harness.ControllerManagerOptions{Log: GinkgoWriter})
	Expect(err).NotTo(HaveOccurred())
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentsNamespace}})).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/agent_role.yaml")).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml")).To(Succeed())
	Expect(env.CreateImage(ctx, admin, "img", "60Gi")).To(Succeed())
	op = startOperator()
	// The API server loads the policies the operator applies
	// asynchronously: wait until the floor bites before any case names
	// the ValidatingAdmissionPolicy as the layer that refuses.
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vap-probe"}})).To(Succeed())
	Eventually(func() error {
		return admin.Create(ctx, &leasingv1alpha1.MacNodeLease{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: "vap-probe"},
			Spec:       leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "none", MinimumDuration: "23h"}})
	}).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy 'macrack-lease-floor'")))
})

var _ = AfterSuite(func() {
	if op != nil {
		Expect(op.Stop()).To(Succeed())
	}
	Expect(env.Stop()).To(Succeed())
})

// startOperator runs the operator as it runs in a cluster: its webhooks, and
// the admission policies, bindings and params it applies and keeps.
func startOperator() *harness.Operator {
	GinkgoHelper()
	o, err := env.StartOperator(harness.OperatorOptions{
		Start: time.Now(), Webhooks: true, ApplyAdmissionPolicies: true, MaxConcurrentReconciles: 2, AuditSink: stream,
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)),
	})
	Expect(err).NotTo(HaveOccurred())
	return o
}
