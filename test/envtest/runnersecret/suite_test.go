// Package runnersecret proves runner.secret at the webhook alone: a real
// API server with MacRack's webhooks (served by the in-process operator,
// controllers left out) and no ValidatingAdmissionPolicy, and tenants
// impersonated with the roles docs/tenant.md gives them. A GitLabRunner
// names a token Secret, or changes where its token goes, only when its
// requester may get that Secret (issue 34).
package runnersecret

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var (
	env   *harness.Env
	op    *harness.Operator
	admin client.Client
	ctx   = context.Background()
)

func TestRunnerSecret(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(20 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	RunSpecs(t, "GitLabRunner token Secret suite")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = harness.Start(harness.WithWebhooks)
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	Expect(env.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml")).To(Succeed())
	op, err = env.StartOperator(harness.OperatorOptions{
		Start: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), Webhooks: true, WebhooksOnly: true,
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)),
	})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if op != nil {
		Expect(op.Stop()).To(Succeed())
	}
	Expect(env.Stop()).To(Succeed())
})
