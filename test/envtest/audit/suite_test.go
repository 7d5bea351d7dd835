// Package audit proves the audit and billing stream against a real API
// server and a real three-node JetStream cluster (bin/nats-server on
// loopback), the stream at three replicas: every transition's record is
// stored exactly once, by id, with no gaps, through a follower killed and
// restarted, the stream's leader killed, the leader killed with a publish
// proposed and unacknowledged, and the whole cluster down for longer than
// the duplicate window with the operator restarted in the middle of it. No
// object's finalizer leaves before its records are acknowledged.
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
	"github.com/boualleiguie/macrack-operator/test/natsserver"
)

var (
	env     *harness.Env
	admin   client.Client
	ctx     = context.Background()
	cluster *natsserver.Cluster
	dir     string
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
	cluster, err = natsserver.StartCluster(dir, 3)
	Expect(err).NotTo(HaveOccurred())
	env, err = harness.Start()
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	_, err = harness.CreateClass(ctx, admin, class, 2)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	// The servers first: a control plane that fails to stop must not leave
	// them running.
	if cluster != nil {
		_ = cluster.Kill()
	}
	_ = os.RemoveAll(dir)
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
