package access

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/boualleiguie/macrack-operator/test/kubeletca"
)

// agentURL is where agent of node serves the kubelet API: the Node's
// published InternalIP and kubelet port, as the API server reads them.
func agentURL(node string) string {
	GinkgoHelper()
	n := &corev1.Node{}
	Expect(admin.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
	Expect(n.Status.Addresses).To(HaveLen(1))
	Expect(n.Status.Addresses[0].Type).To(Equal(corev1.NodeInternalIP))
	return "https://" + net.JoinHostPort(n.Status.Addresses[0].Address, strconv.Itoa(int(n.Status.DaemonEndpoints.KubeletEndpoint.Port)))
}

// execPath is the kubelet API's exec of t's instance.
func execPath(t *tenant, command ...string) string {
	q := url.Values{"command": command, "output": {"1"}, "error": {"1"}}
	return fmt.Sprintf("/exec/%s/%s/macos?%s", t.Namespace, t.Instance.Name, q.Encode())
}

// directExec execs on the agent of node directly, as cfg's identity, over
// SPDY (POST) or websocket (GET), and returns stdout.
func directExec(node string, cfg *rest.Config, websocket bool, path string) (string, error) {
	GinkgoHelper()
	cfg = rest.CopyConfig(cfg)
	cfg.Host = agentURL(node)
	// The agent's serving certificate is its own until the companion
	// issue signs it; the API server does not verify it either without
	// --kubelet-certificate-authority.
	cfg.TLSClientConfig.Insecure, cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile = true, nil, ""
	u, err := url.Parse(cfg.Host + path)
	Expect(err).NotTo(HaveOccurred())
	var e remotecommand.Executor
	if websocket {
		e, err = remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	} else {
		e, err = remotecommand.NewSPDYExecutor(cfg, "POST", u)
	}
	Expect(err).NotTo(HaveOccurred())
	var out, errOut bytes.Buffer
	err = e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
	return out.String(), err
}

// tokenConfig is a bearer-token config for ServiceAccount sa in ns, bound
// cluster-wide to a role with verbs on nodes/proxy.
func tokenConfig(ns, sa string, verbs ...string) *rest.Config {
	GinkgoHelper()
	Expect(client.IgnoreAlreadyExists(admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}))).To(Succeed())
	if len(verbs) > 0 {
		name := "access-" + sa
		Expect(admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, Verbs: verbs}}})).To(Succeed())
		Expect(admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}})).To(Succeed())
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	Expect(admin.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}, tr)).To(Succeed())
	return &rest.Config{BearerToken: tr.Status.Token}
}

// rawGet calls the agent of node without the Kubernetes client: tlsCfg
// says which client certificate, if any, it presents.
func rawGet(node, path string, tlsCfg *tls.Config, header http.Header) (int, string) {
	GinkgoHelper()
	tlsCfg.InsecureSkipVerify = true
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, agentURL(node)+path, nil)
	Expect(err).NotTo(HaveOccurred())
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

var _ = Describe("Tenant access, hostile", Ordered, func() {
	It("refuses tenant B exec and logs of tenant A's VM, which A has", func() {
		for _, args := range [][]string{{"exec", "ci", "--", "true"}, {"logs", "ci"}} {
			r := run(tenantB.Kubeconfig, "", append([]string{"-n", tenantA.Namespace}, args...)...)
			Expect(r.Code).NotTo(BeZero())
			Expect(r.Stderr).To(ContainSubstring("forbidden"))
			ok := run(tenantA.Kubeconfig, "", append([]string{"-n", tenantA.Namespace}, args...)...)
			Expect(ok.Code).To(BeZero(), "positive control: A itself: %s", ok.Stderr)
		}
	})

	It("never serves or starts a Pod a tenant made with nodeName set to a chassis", func() {
		// B may make Pods in its namespace (a namespace admin could), and
		// binds one to A's chassis and one to its own.
		Expect(admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pod-maker", Namespace: tenantB.Namespace},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "delete"}}}})).To(Succeed())
		Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "pod-maker", Namespace: tenantB.Namespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-maker"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: tenantB.User}}})).To(Succeed())
		helpersOnA := helperCount(tenantA.Node)
		for _, p := range []struct{ name, node string }{{"forged-on-a", tenantA.Node}, {"forged-on-own", tenantB.Node}} {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: tenantB.Namespace,
				Labels: map[string]string{"example.com/claims": string(tenantA.Instance.UID)}},
				Spec: corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "macos", Image: "registry.k8s.io/pause:3.10",
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
						Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}}}}
			Eventually(func() error { return tenantB.Client.Create(ctx, pod) }).Should(Succeed())
			r := run(tenantB.Kubeconfig, "", "-n", tenantB.Namespace, "exec", p.name, "--", "sw_vers")
			Expect(r.Code).NotTo(BeZero())
			Expect(r.Stdout).NotTo(ContainSubstring("macOS"))
			Expect(r.Stderr).To(ContainSubstring("no MacRack VM"))
			r = run(tenantB.Kubeconfig, "", "-n", tenantB.Namespace, "logs", p.name)
			Expect(r.Code).NotTo(BeZero())
			Expect(r.Stderr).To(ContainSubstring("no MacRack VM"))
		}
		ok := run(tenantB.Kubeconfig, "", "-n", tenantB.Namespace, "exec", "ci", "--", "sw_vers")
		Expect(ok.Code).To(BeZero(), "positive control: B's own VM: %s", ok.Stderr)
		Consistently(func() int { return helperCount(tenantA.Node) }, 3*time.Second).Should(Equal(helpersOnA), "no VM started for a forged Pod")
		for _, name := range []string{"forged-on-a", "forged-on-own"} {
			p := &corev1.Pod{}
			Expect(admin.Get(ctx, client.ObjectKey{Namespace: tenantB.Namespace, Name: name}, p)).To(Succeed())
			Expect(p.Status.Phase).To(Equal(corev1.PodPending), "nobody runs it")
			Expect(p.Status.ContainerStatuses).To(BeEmpty())
		}
	})

	It("refuses a direct connection without a valid client certificate or token", func() {
		path := execPath(tenantA, "sw_vers")
		code, _ := rawGet(tenantA.Node, path, &tls.Config{}, nil)
		Expect(code).To(Equal(http.StatusUnauthorized), "no credentials")
		code, _ = rawGet(tenantA.Node, path, &tls.Config{}, http.Header{"Authorization": {"Bearer not-a-token"}})
		Expect(code).To(Equal(http.StatusUnauthorized), "a made-up token")

		// A certificate of another CA, for the very name the API server's
		// client has.
		other, err := kubeletca.New(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		cert, err := tls.LoadX509KeyPair(other.CertFile, other.KeyFile)
		Expect(err).NotTo(HaveOccurred())
		code, _ = rawGet(tenantA.Node, "/healthz", &tls.Config{Certificates: []tls.Certificate{cert}}, nil)
		Expect(code).To(Equal(http.StatusUnauthorized), "a client certificate of another CA")

		good, err := tls.LoadX509KeyPair(ca.CertFile, ca.KeyFile)
		Expect(err).NotTo(HaveOccurred())
		code, body := rawGet(tenantA.Node, "/healthz", &tls.Config{Certificates: []tls.Certificate{good}}, nil)
		Expect(code).To(Equal(http.StatusOK), "positive control: the API server's kubelet client: %s", body)
	})

	It("refuses exec to an identity with only get on nodes/proxy, over SPDY and websocket", func() {
		getter := tokenConfig(tenantB.Namespace, "peeker", "get")
		creator := tokenConfig(tenantB.Namespace, "debugger", "get", "create")
		path := execPath(tenantA, "sw_vers")
		Eventually(func() error { _, err := directExec(tenantA.Node, creator, true, path); return err }).Should(Succeed(),
			"positive control: create on nodes/proxy execs over websocket")
		out, err := directExec(tenantA.Node, creator, false, path)
		Expect(err).NotTo(HaveOccurred(), "positive control: and over SPDY")
		Expect(out).To(ContainSubstring("macOS"))
		for _, ws := range []bool{true, false} {
			out, err := directExec(tenantA.Node, getter, ws, path)
			Expect(err).To(MatchError(ContainSubstring("Forbidden (user=system:serviceaccount:")), "websocket=%v", ws)
			Expect(out).To(BeEmpty())
		}
		// Logs are a read: get on nodes/proxy is what the kubelet asks too.
		code, body := rawGet(tenantA.Node, "/containerLogs/"+tenantA.Namespace+"/ci/macos", &tls.Config{},
			http.Header{"Authorization": {"Bearer " + getter.BearerToken}})
		Expect(code).To(Equal(http.StatusOK), body)
	})

	It("refuses agent B's token on agent A's port", func() {
		token, err := os.ReadFile(filepath.Join(agents[tenantB.Node].StateDir, "token"))
		Expect(err).NotTo(HaveOccurred())
		path := execPath(tenantA, "sw_vers")
		for _, ws := range []bool{true, false} {
			_, err := directExec(tenantA.Node, &rest.Config{BearerToken: string(token)}, ws, path)
			Expect(err).To(MatchError(ContainSubstring("Forbidden (user=system:serviceaccount:macrack-agents:agent-")))
		}
		code, _ := rawGet(tenantA.Node, "/healthz", &tls.Config{}, http.Header{"Authorization": {"Bearer " + string(token)}})
		Expect(code).To(Equal(http.StatusForbidden), "authenticated, as agent B, and not allowed")
	})

	It("leaks no goroutine or file descriptor over a thousand exec sessions", func() {
		creator := tokenConfig(tenantA.Namespace, "loadtester", "get", "create")
		path := execPath(tenantA, "true")
		_, err := directExec(tenantA.Node, creator, true, path)
		Expect(err).NotTo(HaveOccurred())
		helper := agents[tenantA.Node].HelperPID(string(tenantA.Instance.UID))
		Expect(helper).To(BeNumerically(">", 0))
		settle := func() (int, int, int) {
			runtime.GC()
			return runtime.NumGoroutine(), fdCount(os.Getpid()), fdCount(helper)
		}
		time.Sleep(time.Second) // the warm-up session's goroutines end
		g0, f0, h0 := settle()
		for i := 0; i < 1000; i++ {
			_, err := directExec(tenantA.Node, creator, i%2 == 0, path)
			Expect(err).NotTo(HaveOccurred(), "session %d", i)
		}
		// The agent runs in this process; the guest agent in the helper.
		Eventually(func() []int { g, f, h := settle(); return []int{g - g0, f - f0, h - h0} }, 20*time.Second, time.Second).
			Should(HaveEach(BeNumerically("<", 40)), "goroutines, fds of the agent, fds of the guest's helper")
	})

	It("fails exec into a VM that is stopping, clearly and at once", func() {
		creator := tokenConfig(tenantB.Namespace, "stopwatcher", "get", "create")
		path := execPath(tenantB, "sw_vers")
		_, err := directExec(tenantB.Node, creator, true, path)
		Expect(err).NotTo(HaveOccurred(), "positive control: the running VM")
		Expect(admin.Delete(ctx, tenantB.Instance)).To(Succeed())
		// kubectl itself refuses once the Pod shows the VM stopped; the
		// agent refuses whatever the Pod says.
		r := run(tenantB.Kubeconfig, "", "-n", tenantB.Namespace, "exec", "ci", "--", "true")
		Expect(r.Code).NotTo(BeZero())
		Expect(r.Stderr).To(Or(ContainSubstring("being deleted"), ContainSubstring("completed pod"), ContainSubstring("not found"), ContainSubstring("no MacRack VM")))
		Expect(r.Elapsed).To(BeNumerically("<", 20*time.Second))
		start := time.Now()
		_, err = directExec(tenantB.Node, creator, true, path)
		Expect(err).To(MatchError(Or(ContainSubstring("is being deleted: exec needs a running VM"), ContainSubstring("no MacRack VM"))))
		Expect(time.Since(start)).To(BeNumerically("<", 10*time.Second))
	})
})

// helperCount is how many VM helpers the agent of node runs.
func helperCount(node string) int {
	GinkgoHelper()
	socks, err := filepath.Glob(filepath.Join(agents[node].StateDir, "run", "*.sock"))
	Expect(err).NotTo(HaveOccurred())
	return len(socks)
}

// fdCount is how many file descriptors process pid holds.
func fdCount(pid int) int {
	GinkgoHelper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	Expect(err).NotTo(HaveOccurred())
	return len(entries)
}
