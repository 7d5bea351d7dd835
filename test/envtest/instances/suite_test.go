// Package instances runs the whole chassis path against a real API server:
// the operator (webhooks, ValidatingAdmissionPolicies, controllers) and two
// host agents, each as its own enrolled ServiceAccount, with real vm-helper
// processes and the sim driver, whose kernel allows two VMs per host. A real
// kube-controller-manager runs beside them (namespace finalisation, garbage
// collection, default ServiceAccounts, node lifecycle and taint-based
// eviction), with a node monitor grace period of 8s.
package instances

import (
	"context"
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
	env        *harness.Env
	op         *harness.Operator
	kcm        *harness.ControllerManager
	admin      client.Client
	ctx        = context.Background()
	helperPath string
	binDir     string
)

func TestInstances(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	RunSpecs(t, "Instances suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter)))
	var err error
	binDir, err = os.MkdirTemp("", "mrbin")
	Expect(err).NotTo(HaveOccurred())
	helperPath, err = harness.BuildVMHelper(binDir)
	Expect(err).NotTo(HaveOccurred())

	// Pods without tolerations of their own are evicted 1s after their Node
	// is tainted NoExecute (upstream 300s): the positive control of the
	// instance Pods' tolerations.
	env, err = harness.Start(harness.WithWebhooks, harness.WithDefaultTolerationSeconds(1))
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	kcm, err = env.StartControllerManager(harness.ControllerManagerOptions{
		NodeMonitorPeriod: time.Second, NodeMonitorGracePeriod: 8 * time.Second, Log: GinkgoWriter,
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.AgentsNamespace}})).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/agent_role.yaml")).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml")).To(Succeed())
	op, err = env.StartOperator(harness.OperatorOptions{
		Start: time.Now(), Webhooks: true, MaxConcurrentReconciles: 4, HeartbeatGrace: 20 * time.Second,
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)),
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(harness.InstallAdmissionPolicies(ctx, admin, op.Engine, harness.OperatorNamespace, op.Params)).To(Succeed())
})

var _ = AfterSuite(func() {
	for _, a := range agents {
		_ = a.Stop()
	}
	// The helpers outlive their agents by design: end them whatever fails
	// below, so that no VM helper outlives a failed suite.
	defer func() {
		for _, a := range agents {
			a.KillHelpers()
			_ = os.RemoveAll(a.StateDir)
		}
		_ = os.RemoveAll(binDir)
	}()
	var opErr error
	if op != nil {
		opErr = op.Stop()
	}
	kcmErr := kcm.Stop() // it must not have exited before
	envErr := env.Stop()
	Expect(opErr).NotTo(HaveOccurred())
	Expect(kcmErr).NotTo(HaveOccurred())
	Expect(envErr).NotTo(HaveOccurred())
})
