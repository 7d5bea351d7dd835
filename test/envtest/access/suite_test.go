// Package access drives tenant access to the VMs through the real kubectl
// binary: exec and logs go from kubectl to a real kube-apiserver, which
// presents its kubelet client certificate (test/kubeletca) to the host
// agent's kubelet API on the chassis' enrolled address, and verifies the
// agent's serving certificate, which the operator signed, against the
// kubelet serving CA; the agent checks
// the caller with a TokenReview or the client CA and a
// SubjectAccessReview, resolves the Pod to an instance on its own slots,
// and reaches the sim guest over the vm-helper's vsock proxy. Two agents
// run, each on its own loopback address, as `make run`'s do. The hostile
// cases stand beside their positive controls.
package access

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
	"github.com/boualleiguie/macrack-operator/test/kubeletca"
)

const (
	class = "m4-access"
	image = "sequoia-15.5-xcode-16.4"
)

var (
	env        *harness.Env
	op         *harness.Operator
	admin      client.Client
	ctx        = context.Background()
	helperPath string
	workDir    string
	ca         *kubeletca.CA
	kubectl    string
	// adminKubeconfig is a cluster administrator's, for kubectl.
	adminKubeconfig string

	// agents by node; tenants A and B, each with a bound lease on its own
	// chassis and a running instance "ci".
	agents   = map[string]*harness.Agent{}
	tenantA  *tenant
	tenantB  *tenant
	addrBase = 40
)

// tenant is a tenant's namespace, its instance and its own kubeconfig:
// a user bound to macrack-tenant-edit there, with a client certificate,
// as a person at a terminal.
type tenant struct {
	*harness.Tenant
	Kubeconfig string
	Instance   *computev1alpha1.MacOSInstance
	Node       string
}

func TestAccess(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	RunSpecs(t, "Access suite")
}

// firstLog is tenant A's VM's log as it stood before any spec ran: the
// journal is bounded, and a thousand forwards or sessions in a spec that
// ran first push the boot stages out of it.
var firstLog string

var _ = BeforeSuite(func() {
	setUp()
	r := run(tenantA.Kubeconfig, "", "-n", tenantA.Namespace, "logs", "ci")
	Expect(r.Code).To(BeZero(), r.Stderr)
	firstLog = r.Stdout
})

var _ = AfterSuite(func() { tearDown() })

// setUp starts the control plane, the operator and two agents, and gives
// tenants A and B a running instance each; the suite and the benchmarks
// share it.
func setUp() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter)))
	var err error
	workDir, err = os.MkdirTemp("", "mracc")
	Expect(err).NotTo(HaveOccurred())
	helperPath, err = harness.BuildVMHelper(workDir)
	Expect(err).NotTo(HaveOccurred())
	kubectl = filepath.Join(harness.RepoRoot(), "bin", "k8s", "kubectl")
	if assets := os.Getenv("KUBEBUILDER_ASSETS"); assets != "" {
		kubectl = filepath.Join(assets, "kubectl")
	}
	Expect(kubectl).To(BeAnExistingFile(), "make test builds kubectl into bin/k8s")

	ca, err = kubeletca.New(workDir)
	Expect(err).NotTo(HaveOccurred())
	env, err = harness.Start(harness.WithWebhooks, ca.Configure)
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	adminKubeconfig, err = env.AdminKubeconfig(workDir)
	Expect(err).NotTo(HaveOccurred())
	Expect(admin.Create(ctx, kubeletca.KubeletAPIAdminBinding())).To(Succeed())
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.AgentsNamespace}})).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/agent_role.yaml")).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml")).To(Succeed())
	op, err = env.StartOperator(harness.OperatorOptions{
		Start: time.Now(), Webhooks: true, MaxConcurrentReconciles: 4, HeartbeatGrace: 20 * time.Second,
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)),
		// The API server verifies the agents against this CA.
		KubeletServingCACertFile: ca.ServingCAFile, KubeletServingCAKeyFile: ca.ServingCAKeyFile,
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(harness.InstallAdmissionPolicies(ctx, admin, op.Engine, harness.OperatorNamespace, op.Params)).To(Succeed())

	_, err = harness.CreateClass(ctx, admin, class, 2)
	Expect(err).NotTo(HaveOccurred())
	Expect(env.CreateImage(ctx, admin, image, "60Gi")).To(Succeed())
	for i := 0; i < 2; i++ {
		startAgent(fmt.Sprintf("127.0.0.%d", addrBase+i))
	}
	tenantA = newTenant("alice")
	tenantB = newTenant("bob")
	Expect(tenantA.Node).NotTo(Equal(tenantB.Node), "one chassis each")
}

// tearDown stops what setUp started.
func tearDown() {
	for _, a := range agents {
		_ = a.Stop()
	}
	defer func() {
		for _, a := range agents {
			a.KillHelpers()
			_ = os.RemoveAll(a.StateDir)
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
}

// startAgent enrolls a chassis with address and runs its agent, serving
// the kubelet API there on a free port.
func startAgent(address string) *harness.Agent {
	GinkgoHelper()
	l, err := net.Listen("tcp", net.JoinHostPort(address, "0"))
	Expect(err).NotTo(HaveOccurred())
	port := l.Addr().(*net.TCPAddr).Port
	Expect(l.Close()).To(Succeed())
	a, err := env.StartAgent(harness.AgentOptions{Serial: harness.NewSerial(), Class: class, HelperPath: helperPath,
		Heartbeat: 2 * time.Second, Address: address, KubeletPort: port, KubeletClientCAFile: ca.CAFile,
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName(address)})
	Expect(err).NotTo(HaveOccurred())
	agents[a.Node] = a
	// The API server reaches the agent once it serves the certificate
	// the operator signs (test/envtest/servingcert).
	roots, err := ca.ServingRoots()
	Expect(err).NotTo(HaveOccurred())
	Eventually(func() error {
		conn, err := tls.Dial("tcp", net.JoinHostPort(address, strconv.Itoa(port)), &tls.Config{RootCAs: roots, ServerName: address})
		if err == nil {
			_ = conn.Close()
		}
		return err
	}).Should(Succeed(), "agent %s serves a certificate of the kubelet serving CA", a.Node)
	return a
}

// newTenant makes a tenant with its own kubeconfig, a bound lease and a
// running instance "ci" whose Pod is Ready.
func newTenant(user string) *tenant {
	GinkgoHelper()
	t, err := env.NewTenant(ctx, user)
	Expect(err).NotTo(HaveOccurred())
	kc, err := env.KubeconfigAs(workDir, user)
	Expect(err).NotTo(HaveOccurred())
	l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: t.Namespace},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h"}}
	Expect(t.Client.Create(ctx, l)).To(Succeed())
	Eventually(func() leasingv1alpha1.MacNodeLeasePhase {
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), l)).To(Succeed())
		return l.Status.Phase
	}).Should(Equal(leasingv1alpha1.LeaseBound))
	inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "ci", Namespace: t.Namespace},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: l.Name, ImageName: image, CPU: 4,
			Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("100Gi")}}
	Eventually(func() error { return t.Client.Create(ctx, inst) }).Should(Succeed())
	// The Pod's Ready is the guest's ready-for-work under a fresh
	// heartbeat: what a tenant waits for.
	Eventually(func() bool {
		p := &corev1.Pod{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(inst), p); err != nil {
			return false
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}, 120*time.Second).Should(BeTrue(), "the instance's Pod becomes Ready")
	Expect(admin.Get(ctx, client.ObjectKeyFromObject(inst), inst)).To(Succeed())
	return &tenant{Tenant: t, Kubeconfig: kc, Instance: inst, Node: inst.Status.NodeName}
}
