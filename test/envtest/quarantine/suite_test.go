// Package quarantine runs the quota-stuck loop against a real API server:
// the operator (webhooks, ValidatingAdmissionPolicies, controllers) and host
// agents on sim hosts whose kernel VM counter sticks, with real vm-helper
// processes. Each chassis is fenced, its VMs stopped gracefully, its host
// rebooted and probed, and it goes back to the lease that held it, while
// the operator's controllers, the agent or both are killed at each step.
//
// The webhooks run in an operator replica of their own, as a Deployment of
// two keeps them served while one replica dies: what is killed is the
// replica that runs the loop.
package quarantine

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var (
	env *harness.Env
	// op runs the controllers, and is killed; hooks serves the webhooks.
	op, hooks  *harness.Operator
	admin      client.Client
	ctx        = context.Background()
	helperPath string
	binDir     string
	agents     = map[string]*harness.Agent{}
)

func TestQuarantine(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	RunSpecs(t, "Quarantine suite")
}

// operatorOptions are the same at every (re)start: the operator keeps no
// state of its own, and its clock starts at the real now.
func operatorOptions() harness.OperatorOptions {
	return harness.OperatorOptions{
		Start: time.Now(), MaxConcurrentReconciles: 4,
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName("operator"),
	}
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
	hooks, err = env.StartOperator(harness.OperatorOptions{Start: time.Now(), Webhooks: true, WebhooksOnly: true,
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName("webhooks")})
	Expect(err).NotTo(HaveOccurred())
	op, err = env.StartOperator(operatorOptions())
	Expect(err).NotTo(HaveOccurred())
	Expect(harness.InstallAdmissionPolicies(ctx, admin, op.Engine, harness.OperatorNamespace, op.Params)).To(Succeed())
	_, err = harness.CreateClass(ctx, admin, class, 2)
	Expect(err).NotTo(HaveOccurred())
	Expect(env.CreateImage(ctx, admin, image, "60Gi")).To(Succeed())
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
	}()
	var opErr error
	for _, o := range []*harness.Operator{op, hooks} {
		if o != nil {
			opErr = errors.Join(opErr, o.Stop())
		}
	}
	envErr := env.Stop()
	Expect(opErr).NotTo(HaveOccurred())
	Expect(envErr).NotTo(HaveOccurred())
})
