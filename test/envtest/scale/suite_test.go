// Package scale is the binding race at scale (issue 17): a real API server
// with MacRack's webhooks installed (served over TLS by the in-process
// operator), a fake clock, 900 Ready chassis of one class and 1,000 tenants,
// each its own namespace and identity, leasing at once. A watch through the
// API server sees every intermediate state of the leases and the MacNodes.
package scale

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var (
	env *harness.Env
	op  *harness.Operator
	// admin is the administrator, without client-side rate limiting: the
	// suite creates thousands of objects.
	admin client.Client
	ctx   = context.Background()
	// start is the fake clock's first reading.
	start = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
)

func TestScale(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	// go test's own timeout (10m unless -timeout says otherwise) panics the
	// binary without AfterSuite, and etcd and kube-apiserver outlive it.
	// Ginkgo's timeout comes first, with time left to stop them.
	suiteConfig, reporterConfig := GinkgoConfiguration()
	if deadline, ok := t.Deadline(); ok {
		if left := time.Until(deadline) - 90*time.Second; left > 0 && left < suiteConfig.Timeout {
			suiteConfig.Timeout = left
		}
	}
	RunSpecs(t, "Binding race at scale suite", suiteConfig, reporterConfig)
}

var _ = BeforeSuite(func() {
	var err error
	env, err = harness.Start(harness.WithWebhooks)
	Expect(err).NotTo(HaveOccurred())
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side limit
	admin, err = client.New(cfg, client.Options{Scheme: env.Scheme, Mapper: env.Client.RESTMapper()})
	Expect(err).NotTo(HaveOccurred())
	Expect(env.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml")).To(Succeed())
	// The production default of parallel lease reconciles (cmd/operator's
	// --max-concurrent-reconciles). zap's production level, Info: a debug
	// line per lost race would be thousands.
	op, err = env.StartOperator(harness.OperatorOptions{
		Start: start, Webhooks: true, MaxConcurrentReconciles: 4,
		Log: zap.New(zap.WriteTo(GinkgoWriter)),
	})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if op != nil {
		Expect(op.Stop()).To(Succeed())
	}
	Expect(env.Stop()).To(Succeed())
})
