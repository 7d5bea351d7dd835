// Package metrics checks the operator's Prometheus metrics against a real
// API server: the operator in-process (webhooks and controllers), a host
// agent on a sim host with real vm-helper processes, and a real
// Distribution registry on loopback. A small fleet is driven until every
// series exists (a chassis leased, one spare, a lease bound, a lease
// refused, a golden pre-pulled and an instance cloned from it); the
// operator's registry is gathered, as its /metrics serves it, and every
// metric the Grafana dashboard (config/grafana/macrack.json) queries must
// be in it.
package metrics

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var (
	env        *harness.Env
	op         *harness.Operator
	admin      client.Client
	ctx        = context.Background()
	helperPath string
	binDir     string
	agent      *harness.Agent
	// records is the operator's audit stream, its JSON lines.
	records = &lines{}
)

// lines keeps what the JSON-lines sink writes, and shows it in the log.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = GinkgoWriter.Write(p)
	return l.buf.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func TestMetrics(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	RunSpecs(t, "Metrics suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter)))
	var err error
	binDir, err = os.MkdirTemp("", "mrbin")
	Expect(err).NotTo(HaveOccurred())
	helperPath, err = harness.BuildVMHelper(binDir)
	Expect(err).NotTo(HaveOccurred())

	env, err = harness.Start(harness.WithWebhooks)
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.AgentsNamespace}})).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/agent_role.yaml")).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml")).To(Succeed())
	// No heartbeat grace: the spare chassis has no agent.
	// The audit stream goes to the log, as the operator's default stdout
	// sink would send it: its export metrics are part of every scrape.
	op, err = env.StartOperator(harness.OperatorOptions{
		Start: time.Now(), Webhooks: true, MaxConcurrentReconciles: 4, AuditSink: sink.NewLines(records),
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName("operator"),
	})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if agent != nil {
		_ = agent.Stop()
	}
	// The helpers outlive their agent by design: end them whatever fails
	// below.
	defer func() {
		if agent != nil {
			agent.KillHelpers()
			_ = os.RemoveAll(agent.StateDir)
		}
		_ = os.RemoveAll(binDir)
	}()
	var opErr error
	if op != nil {
		opErr = op.Stop()
	}
	envErr := env.Stop()
	Expect(opErr).NotTo(HaveOccurred())
	Expect(envErr).NotTo(HaveOccurred())
})
