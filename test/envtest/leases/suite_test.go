// Package leases is the reject table: a real API server with MacRack's
// webhooks installed (served over TLS by the in-process operator) and no
// ValidatingAdmissionPolicy binding, a fake clock, and tenants impersonated
// with the roles they would hold. Every case asserts which layer refused it,
// and has a positive control beside it.
package leases

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
	// start is the fake clock's first reading.
	start = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
)

func TestLeases(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(20 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	RunSpecs(t, "Lease reject table suite")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = harness.Start(harness.WithWebhooks)
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	Expect(env.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml")).To(Succeed())
	Expect(env.CreateImage(ctx, admin, "sequoia-15.5-xcode-16.4", "60Gi")).To(Succeed())
	op, err = env.StartOperator(harness.OperatorOptions{
		Start: start, Webhooks: true, MaxConcurrentReconciles: 4,
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
