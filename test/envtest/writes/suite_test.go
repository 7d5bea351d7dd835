// Package writes counts the API server's writes over one lease's whole
// life (issue 17): created, bound, one instance run from a cached golden and
// deleted, the lease deleted early and Held, released at earliestReleaseAt,
// the chassis wiped and Ready again, the lease gone. The counts come from the
// API server itself: its apiserver_request_total, and its audit log, which
// names the writer of each write and carries its body.
package writes

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var (
	env   *harness.Env
	admin client.Client
	ctx   = context.Background()
	dir   string
	// auditLog is the API server's audit log: one JSON line per write.
	auditLog string
)

func TestWrites(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	RunSpecs(t, "Writes per lease suite")
}

// auditPolicy logs every write, with its request body, once it completed;
// nothing else. The writes of MacRack's statuses carry the object the API
// server answered with as well, from which the one-writer test tells
// which fields each write changed.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: RequestResponse
  verbs: ["update", "patch"]
  resources:
  - group: fleet.macrack.io
    resources: ["macnodes/status"]
  - group: leasing.macrack.io
    resources: ["macnodeleases/status"]
  - group: compute.macrack.io
    resources: ["macosinstances/status"]
- level: Request
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter)))
	var err error
	dir, err = os.MkdirTemp("", "mrwrites")
	Expect(err).NotTo(HaveOccurred())
	policy := filepath.Join(dir, "audit-policy.yaml")
	Expect(os.WriteFile(policy, []byte(auditPolicy), 0o600)).To(Succeed())
	auditLog = filepath.Join(dir, "audit.log")
	env, err = harness.Start(harness.WithWebhooks, func(e *envtest.Environment) {
		// The machine may be busy: give each control-plane process a minute.
		e.ControlPlaneStartTimeout = time.Minute
		e.ControlPlane.GetAPIServer().Configure().
			Append("audit-policy-file", policy).
			Append("audit-log-path", auditLog).
			Append("audit-log-mode", "blocking").
			Append("audit-log-format", "json")
	})
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.AgentsNamespace}})).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/agent_role.yaml")).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml")).To(Succeed())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
	_ = os.RemoveAll(dir)
})
