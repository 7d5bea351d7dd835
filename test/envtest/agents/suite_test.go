// Package agents proves agent.scope under impersonation: a real API server
// with the agents' RBAC, the generated ValidatingAdmissionPolicies and the
// webhooks, and host agents impersonated as their ServiceAccounts. Each case
// asserts which layer refused it, beside a positive control.
package agents

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

	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

const agentsNamespace = "macrack-agents"

var (
	env   *harness.Env
	op    *harness.Operator
	admin client.Client
	ctx   = context.Background()
)

func TestAgents(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	RunSpecs(t, "Agent scope suite")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = harness.Start(harness.WithWebhooks)
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentsNamespace}})).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/agent_role.yaml")).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml")).To(Succeed())
	op, err = env.StartOperator(harness.OperatorOptions{
		Start: time.Now(), Webhooks: true, MaxConcurrentReconciles: 2,
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)),
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(harness.InstallAdmissionPolicies(ctx, admin, op.Engine, harness.OperatorNamespace, op.Params)).To(Succeed())
})

var _ = AfterSuite(func() {
	if op != nil {
		Expect(op.Stop()).To(Succeed())
	}
	Expect(env.Stop()).To(Succeed())
})
