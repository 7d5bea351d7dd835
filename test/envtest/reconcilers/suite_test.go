// Package reconcilers proves the reconcilers' own layer: no webhook and no
// ValidatingAdmissionPolicy is installed, illegal objects go straight to
// storage, and the controllers, asking the policies, refuse to act on them.
package reconcilers

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

func TestReconcilers(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(20 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	RunSpecs(t, "Reconcilers without admission suite")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = harness.Start()
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	op, err = env.StartOperator(harness.OperatorOptions{
		Start: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), MaxConcurrentReconciles: 2,
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
