// Package gitlabrunner runs GitLabRunners end to end against a real API
// server: the operator (webhooks, ValidatingAdmissionPolicies, controllers)
// acting as each tenant's macrack-gitlab-runner ServiceAccount, host agents
// on sim hosts with real vm-helper processes whose sim guests run one job
// each, and a fake GitLab (internal/gitlab/gitlabtest) that speaks the
// runner API's real shapes, over TLS.
package gitlabrunner

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
	"github.com/boualleiguie/macrack-operator/internal/gitlab/gitlabtest"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

const (
	class    = "m4-sim"
	oneVM    = "m4-sim-one"
	image    = "sequoia-15.5-xcode-16.4"
	imageMin = "60Gi"
)

var (
	env        *harness.Env
	op         *harness.Operator
	admin      client.Client
	ctx        = context.Background()
	helperPath string
	binDir     string
	// auditLog is the API server's audit log.
	auditLog string
	gl       *gitlabtest.Server
	agents   []*harness.Agent
	// logs holds every line the operator, the agents and the helpers
	// logged, and stream the audit stream: the token must be in neither.
	logs, stream = &syncBuffer{}, &syncBuffer{}
)

func TestGitLabRunner(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(90 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	RunSpecs(t, "GitLabRunner suite")
}

// syncBuffer is a bytes.Buffer safe for the loggers' concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logger logs to the spec's output and to logs.
func logger(name string) logr.Logger {
	return zap.New(zap.WriteTo(io.MultiWriter(GinkgoWriter, logs)), zap.UseDevMode(true)).WithName(name)
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(GinkgoWriter, logs))))
	var err error
	binDir, err = os.MkdirTemp("", "mrbin")
	Expect(err).NotTo(HaveOccurred())
	helperPath, err = harness.BuildVMHelper(binDir)
	Expect(err).NotTo(HaveOccurred())

	// The API server's audit log, as a cluster keeps one: Secrets at
	// Metadata (their data is never logged), everything else with its
	// request and response bodies, where a leaked token would show.
	auditPolicy := filepath.Join(binDir, "audit-policy.yaml")
	Expect(os.WriteFile(auditPolicy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources: [{group: "", resources: ["secrets"]}]
- level: RequestResponse
`), 0o600)).To(Succeed())
	auditLog = filepath.Join(binDir, "audit.log")
	env, err = harness.Start(harness.WithWebhooks, func(e *envtest.Environment) {
		e.ControlPlane.GetAPIServer().Configure().
			Append("audit-policy-file", auditPolicy).
			Append("audit-log-path", auditLog).
			Append("audit-log-mode", "blocking").
			Append("audit-log-format", "json")
	})
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.AgentsNamespace}})).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/agent_role.yaml")).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml")).To(Succeed())
	op, err = env.StartOperator(harness.OperatorOptions{
		Start: time.Now(), Webhooks: true, MaxConcurrentReconciles: 4,
		Log:       logger("operator"),
		AuditSink: sink.NewLines(stream),
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(harness.InstallAdmissionPolicies(ctx, admin, op.Engine, harness.OperatorNamespace, op.Params)).To(Succeed())
	_, err = harness.CreateClass(ctx, admin, class, 2)
	Expect(err).NotTo(HaveOccurred())
	_, err = harness.CreateClass(ctx, admin, oneVM, 1)
	Expect(err).NotTo(HaveOccurred())
	Expect(env.CreateImage(ctx, admin, image, imageMin)).To(Succeed())
	gl = gitlabtest.NewServer(nil)
})

var _ = AfterSuite(func() {
	for _, a := range agents {
		_ = a.Stop()
	}
	defer func() {
		for _, a := range agents {
			a.KillHelpers()
			_ = os.RemoveAll(a.StateDir)
		}
		_ = os.RemoveAll(binDir)
		if gl != nil {
			gl.Close()
		}
	}()
	var opErr error
	if op != nil {
		opErr = op.Stop()
	}
	envErr := env.Stop()
	Expect(errors.Join(opErr, envErr)).NotTo(HaveOccurred())
})
