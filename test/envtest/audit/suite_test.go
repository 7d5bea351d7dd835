// Package audit proves the audit and billing stream against a real API
// server and a real nats-server (JetStream): every transition's record
// reaches the stream at least once, with no gaps, through a sink outage of
// more than five minutes of the operator's clock and an operator restart in
// the middle of it.
package audit

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var (
	env   *harness.Env
	admin client.Client
	ctx   = context.Background()
	nats  *harness.NATS
	dir   string
)

func TestAudit(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	RunSpecs(t, "Audit stream suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter)))
	var err error
	dir, err = os.MkdirTemp("", "mraudit")
	Expect(err).NotTo(HaveOccurred())
	nats, err = harness.StartNATS(dir)
	Expect(err).NotTo(HaveOccurred())
	env, err = harness.Start()
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
})

var _ = AfterSuite(func() {
	// nats-server first: a control plane that fails to stop must not leave
	// it running.
	if nats != nil {
		_ = nats.Kill()
	}
	_ = os.RemoveAll(dir)
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
