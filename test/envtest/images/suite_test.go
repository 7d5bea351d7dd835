// Package images runs the golden-image path against a real API server: the
// operator (webhooks, ValidatingAdmissionPolicies, controllers, among them
// the image controller that resolves MacOSImages from their registry), real
// Distribution registries on loopback, and host agents, each as its own
// enrolled ServiceAccount with the sim driver and real vm-helper processes,
// that pull goldens into their cache on demand, at a booking and for their
// class, evict within the class's budget, and report what they hold. A real
// kube-controller-manager runs beside them.
package images

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

func TestImages(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	RunSpecs(t, "Images suite")
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
	kcm, err = env.StartControllerManager(harness.ControllerManagerOptions{Log: GinkgoWriter})
	Expect(err).NotTo(HaveOccurred())
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.AgentsNamespace}})).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/agent_role.yaml")).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml")).To(Succeed())
	// No heartbeat grace: the last container moves the operator's fake
	// clock a day on, past every agent's last heartbeat.
	op, err = env.StartOperator(harness.OperatorOptions{
		Start: time.Now(), Webhooks: true, MaxConcurrentReconciles: 4,
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
		for _, s := range registries {
			s.Stop()
			_ = os.RemoveAll(s.Root())
		}
		_ = os.RemoveAll(binDir)
	}()
	var opErr error
	if op != nil {
		opErr = op.Stop()
	}
	var kcmErr error
	if kcm != nil {
		kcmErr = kcm.Stop() // it must not have exited before
	}
	envErr := env.Stop()
	Expect(opErr).NotTo(HaveOccurred())
	Expect(kcmErr).NotTo(HaveOccurred())
	Expect(envErr).NotTo(HaveOccurred())
})
