// Package exactcap proves instance.cap exact at admission, as ResourceQuota
// is exact: a real API server calls two replicas of MacRack's validating
// webhook, each with its own cache, through a balancer that sends each
// request to the next replica. The first replica runs the controllers too
// (binding, placement, the reservations' sweeper); the second serves the
// webhooks alone. A real kube-controller-manager runs the ResourceQuota
// controller, whose admission plugin refuses after the webhook has
// admitted. Both replicas read one fake business clock.
package exactcap

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var (
	env   *harness.Env
	admin client.Client
	ctx   = context.Background()
	kcm   *harness.ControllerManager
	// replicas are the two webhook replicas; replicas[0] runs the
	// controllers too.
	replicas [2]*harness.Operator
	clk      *clocktesting.FakeClock
	lb       *balancer
)

func TestExactCap(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	RunSpecs(t, "Exact instance cap suite")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = harness.Start(harness.WithWebhooks)
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	kcm, err = env.StartControllerManager(harness.ControllerManagerOptions{
		Controllers: []string{"resourcequota-controller", "namespace-controller"}, Log: GinkgoWriter,
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.AgentsNamespace}})).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml")).To(Succeed())
	Expect(env.ApplyYAML(ctx, "config/rbac/agent_role.yaml")).To(Succeed())

	w := env.Environment.WebhookInstallOptions
	clk = clocktesting.NewFakeClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	var targets [2]*url.URL
	for i := range replicas {
		port := freePort(w.LocalServingHost)
		targets[i] = &url.URL{Scheme: "https", Host: net.JoinHostPort(w.LocalServingHost, strconv.Itoa(port))}
		replicas[i], err = env.StartOperator(harness.OperatorOptions{
			Clock: clk, Webhooks: true, WebhooksOnly: i == 1, WebhookPort: port, MaxConcurrentReconciles: 4,
			Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName("replica-" + strconv.Itoa(i)),
		})
		Expect(err).NotTo(HaveOccurred())
	}
	lb = startBalancer(w.LocalServingHost, w.LocalServingPort, w.LocalServingCertDir, w.LocalServingCAData, targets)
	Expect(env.CreateImage(ctx, admin, image, "60Gi")).To(Succeed())
})

var _ = AfterSuite(func() {
	for _, r := range replicas {
		if r != nil {
			Expect(r.Stop()).To(Succeed())
		}
	}
	if lb != nil {
		_ = lb.srv.Close()
	}
	if kcm != nil {
		Expect(kcm.Stop()).To(Succeed())
	}
	Expect(env.Stop()).To(Succeed())
})

func freePort(host string) int {
	GinkgoHelper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// balancer is the Service in front of the replicas: it ends the API
// server's TLS on the webhook's own certificate and sends each request,
// not each connection (the API server keeps one open), to the next replica.
type balancer struct {
	srv    *http.Server
	next   atomic.Uint64
	served [2]atomic.Int64
}

func startBalancer(host string, port int, certDir string, caPEM []byte, targets [2]*url.URL) *balancer {
	GinkgoHelper()
	pool := x509.NewCertPool()
	Expect(pool.AppendCertsFromPEM(caPEM)).To(BeTrue())
	b := &balancer{}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			i := b.next.Add(1) % 2
			b.served[i].Add(1)
			r.SetURL(targets[i])
		},
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 64},
	}
	b.srv = &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	Expect(err).NotTo(HaveOccurred())
	go func() {
		_ = b.srv.ServeTLS(l, filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	}()
	return b
}
