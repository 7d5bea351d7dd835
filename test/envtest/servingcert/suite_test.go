// Package servingcert drives the host agents' kubelet serving
// certificates against a real kube-apiserver that verifies kubelets
// (--kubelet-certificate-authority, test/kubeletca): two agents, each on
// its own loopback address, request theirs; the operator, running with the
// kubelet serving CA, approves and signs an agent's request for its own
// Node and enrolled address, and denies or ignores the rest. The hostile
// requests stand beside the positive control, and each refusal says which
// layer refused: RBAC, agent.scope, or the operator's rules.
package servingcert

import (
	"context"
	"net"
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
	"github.com/boualleiguie/macrack-operator/test/kubeletca"
)

const class = "m4-serving"

var (
	env     *harness.Env
	op      *harness.Operator
	admin   client.Client
	ctx     = context.Background()
	workDir string
	ca      *kubeletca.CA

	// agentA and agentB serve their kubelet API on their own addresses.
	agentA, agentB *agent
)

// agent is a running agent, its enrolled address and its kubelet port.
type agent struct {
	*harness.Agent
	Address string
	Port    int
}

func TestServingCertificates(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	RunSpecs(t, "Kubelet serving certificates suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter)))
	var err error
	workDir, err = os.MkdirTemp("", "mrsc")
	Expect(err).NotTo(HaveOccurred())
	ca, err = kubeletca.New(workDir)
	Expect(err).NotTo(HaveOccurred())
	env, err = harness.Start(ca.Configure)
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	Expect(admin.Create(ctx, kubeletca.KubeletAPIAdminBinding())).To(Succeed())
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.AgentsNamespace}})).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/agent_role.yaml")).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml")).To(Succeed())
	op, err = env.StartOperator(harness.OperatorOptions{
		Start: time.Now(), MaxConcurrentReconciles: 2,
		Log:                      zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)),
		KubeletServingCACertFile: ca.ServingCAFile, KubeletServingCAKeyFile: ca.ServingCAKeyFile,
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(harness.InstallAdmissionPolicies(ctx, admin, op.Engine, harness.OperatorNamespace, op.Params)).To(Succeed())
	_, err = harness.CreateClass(ctx, admin, class, 2)
	Expect(err).NotTo(HaveOccurred())
	agentA = startAgent("127.0.0.60")
	agentB = startAgent("127.0.0.61")
})

var _ = AfterSuite(func() {
	for _, a := range []*agent{agentA, agentB} {
		if a != nil {
			_ = a.Stop()
		}
	}
	defer func() {
		for _, a := range []*agent{agentA, agentB} {
			if a != nil {
				_ = os.RemoveAll(a.StateDir)
			}
		}
		_ = os.RemoveAll(workDir)
	}()
	var opErr error
	if op != nil {
		opErr = op.Stop()
	}
	envErr := env.Stop()
	Expect(opErr).NotTo(HaveOccurred())
	Expect(envErr).NotTo(HaveOccurred())
})

// startAgent enrolls a chassis with address and runs its agent, serving
// the kubelet API there on a free port. No instance runs in this suite:
// the agent never starts a VM helper.
func startAgent(address string) *agent {
	GinkgoHelper()
	l, err := net.Listen("tcp", net.JoinHostPort(address, "0"))
	Expect(err).NotTo(HaveOccurred())
	port := l.Addr().(*net.TCPAddr).Port
	Expect(l.Close()).To(Succeed())
	a, err := env.StartAgent(harness.AgentOptions{Serial: harness.NewSerial(), Class: class, HelperPath: "/bin/false",
		Heartbeat: 2 * time.Second, Address: address, KubeletPort: port, KubeletClientCAFile: ca.CAFile,
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName(address)})
	Expect(err).NotTo(HaveOccurred())
	return &agent{Agent: a, Address: address, Port: port}
}
