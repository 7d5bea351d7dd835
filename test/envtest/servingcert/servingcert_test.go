package servingcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/servingcert"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// csrFor is a request of signer named name, for cn in system:nodes with
// the given IPs and DNS names, of a fresh P-256 key: what an agent, or an
// attacker holding an agent's credentials, would send.
func csrFor(name, signer, cn string, ips, dns []string) *certificatesv1.CertificateSigningRequest {
	GinkgoHelper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	Expect(err).NotTo(HaveOccurred())
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:           pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName:        signer,
			Usages:            []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
			ExpirationSeconds: ptr.To(int32(3600)),
		},
	}
}

// asAgent acts as a's ServiceAccount.
func asAgent(a *agent) client.Client {
	GinkgoHelper()
	c, err := env.ClientAsServiceAccount(harness.AgentsNamespace, "agent-"+a.Node)
	Expect(err).NotTo(HaveOccurred())
	return c
}

func condition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequestCondition {
	for i := range csr.Status.Conditions {
		if csr.Status.Conditions[i].Type == t {
			return &csr.Status.Conditions[i]
		}
	}
	return nil
}

// decided waits until the request is approved, denied or failed.
func decided(name string) *certificatesv1.CertificateSigningRequest {
	GinkgoHelper()
	csr := &certificatesv1.CertificateSigningRequest{}
	Eventually(func() []certificatesv1.CertificateSigningRequestCondition {
		Expect(admin.Get(ctx, client.ObjectKey{Name: name}, csr)).To(Succeed())
		return csr.Status.Conditions
	}).ShouldNot(BeEmpty(), "the operator decides %s", name)
	return csr
}

// expectDenied asserts the operator denied the request, and only that,
// with a message naming rule and saying says, and a Warning Event.
func expectDenied(name, rule, says string) {
	GinkgoHelper()
	csr := decided(name)
	c := condition(csr, certificatesv1.CertificateDenied)
	Expect(c).NotTo(BeNil(), "denied: %+v", csr.Status.Conditions)
	Expect(c.Reason).To(Equal(servingcert.ReasonDenied))
	Expect(c.Message).To(ContainSubstring(rule + ": "))
	Expect(c.Message).To(ContainSubstring(says))
	Expect(condition(csr, certificatesv1.CertificateApproved)).To(BeNil())
	Consistently(func() []byte {
		Expect(admin.Get(ctx, client.ObjectKey{Name: name}, csr)).To(Succeed())
		return csr.Status.Certificate
	}, "1s").Should(BeEmpty(), "a denied request is never signed")
	expectEvent(name, corev1.EventTypeWarning, servingcert.ReasonDenied, rule+": ")
}

// expectEvent waits for an Event about the request.
func expectEvent(name, typ, reason, note string) {
	GinkgoHelper()
	Eventually(func() []string {
		events := &eventsv1.EventList{}
		Expect(admin.List(ctx, events)).To(Succeed())
		var out []string
		for _, e := range events.Items {
			if e.Regarding.Kind == "CertificateSigningRequest" && e.Regarding.Name == name {
				out = append(out, e.Type+" "+e.Reason+" "+e.Note)
			}
		}
		return out
	}).Should(ContainElement(And(HavePrefix(typ+" "+reason+" "), ContainSubstring(note))), "an Event about %s", name)
}

// logsThroughAPIServer asks the API server for the logs of a Pod bound to
// node, which it fetches from the node's kubelet API.
func logsThroughAPIServer(node string) error {
	GinkgoHelper()
	ns := "logs-" + node
	Expect(client.IgnoreAlreadyExists(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bound", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: fleetv1alpha1.InstanceContainer, Image: fleetv1alpha1.InstancePodImage}}}}
	Expect(client.IgnoreAlreadyExists(admin.Create(ctx, pod))).To(Succeed())
	cs, err := kubernetes.NewForConfig(env.Config)
	Expect(err).NotTo(HaveOccurred())
	body, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: fleetv1alpha1.InstanceContainer}).DoRaw(ctx)
	if err == nil {
		return fmt.Errorf("logs served: %q", body)
	}
	// The API server's answer, which names the kubelet's.
	return fmt.Errorf("%w: %s", err, body)
}

// selfSigned is a self-signed serving certificate for ip.
func selfSigned(ip string) tls.Certificate {
	GinkgoHelper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "system:node:impostor"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP(ip)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	Expect(err).NotTo(HaveOccurred())
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func hostPort(a *agent) string { return net.JoinHostPort(a.Address, strconv.Itoa(a.Port)) }

var _ = Describe("Kubelet serving certificates", Ordered, func() {
	It("signs agent A's request for its own address, and the API server verifies the certificate it serves (positive control)", func() {
		roots, err := ca.ServingRoots()
		Expect(err).NotTo(HaveOccurred())

		By("agent A serves a certificate of the kubelet serving CA for its address")
		var leaf *x509.Certificate
		Eventually(func() error {
			conn, err := tls.Dial("tcp", hostPort(agentA), &tls.Config{RootCAs: roots, ServerName: agentA.Address})
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			leaf = conn.ConnectionState().PeerCertificates[0]
			return nil
		}).Should(Succeed())
		Expect(leaf.IPAddresses).To(HaveLen(1))
		Expect(leaf.IPAddresses[0].String()).To(Equal(agentA.Address))
		Expect(leaf.DNSNames).To(BeEmpty())
		Expect(leaf.Subject.CommonName).To(Equal("system:node:" + agentA.Node))
		Expect(leaf.Subject.Organization).To(Equal([]string{"system:nodes"}))
		Expect(leaf.ExtKeyUsage).To(Equal([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}))
		// 30 days from 5 minutes back, within the CA's own life (a week,
		// kubeletca's).
		caPEM, err := os.ReadFile(ca.ServingCAFile)
		Expect(err).NotTo(HaveOccurred())
		block, _ := pem.Decode(caPEM)
		caCert, err := x509.ParseCertificate(block.Bytes)
		Expect(err).NotTo(HaveOccurred())
		Expect(leaf.NotBefore).To(BeTemporally("~", time.Now().Add(-5*time.Minute), time.Minute))
		Expect(leaf.NotAfter).To(BeTemporally("~", earliest(leaf.NotBefore.Add(5*time.Minute+30*24*time.Hour), caCert.NotAfter), time.Second))

		By("for its address alone: as agent B's, it does not verify")
		_, err = tls.Dial("tcp", hostPort(agentA), &tls.Config{RootCAs: roots, ServerName: agentB.Address})
		Expect(err).To(MatchError(ContainSubstring("certificate is valid for " + agentA.Address)))

		By("its request is agent A's, approved by MacRack and issued")
		csrs := &certificatesv1.CertificateSigningRequestList{}
		Expect(admin.List(ctx, csrs)).To(Succeed())
		var own []certificatesv1.CertificateSigningRequest
		for _, c := range csrs.Items {
			if strings.HasPrefix(c.Name, "kubelet-serving-"+agentA.Node+"-") {
				own = append(own, c)
			}
		}
		Expect(own).To(HaveLen(1))
		Expect(own[0].Spec.Username).To(Equal("system:serviceaccount:" + harness.AgentsNamespace + ":agent-" + agentA.Node))
		Expect(own[0].Spec.SignerName).To(Equal(fleetv1alpha1.KubeletServingSigner))
		Expect(condition(&own[0], certificatesv1.CertificateApproved)).NotTo(BeNil())
		Expect(condition(&own[0], certificatesv1.CertificateApproved).Reason).To(Equal(servingcert.ReasonApproved))
		Expect(own[0].Status.Certificate).NotTo(BeEmpty())
		expectEvent(own[0].Name, corev1.EventTypeNormal, servingcert.ReasonApproved, agentA.Address)
		expectEvent(own[0].Name, corev1.EventTypeNormal, servingcert.ReasonIssued, agentA.Address)

		By("the API server, which verifies kubelets against the CA, reaches the agent's kubelet API")
		// A Pod bound to the Node: its logs go from the API server to the
		// agent, which answers that no VM of its own is that Pod. (nodes/proxy
		// refuses loopback addresses.)
		// The operator publishes the Node's address after the agent registers.
		Eventually(func() error { return logsThroughAPIServer(agentA.Node) }).Should(MatchError(ContainSubstring("no MacRack VM")))

		By("negative control: an impostor at a Node's address, with a self-signed certificate, is refused")
		impostor := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("impostor"))
		}))
		impostor.Listener, err = net.Listen("tcp", "127.0.0.62:0")
		Expect(err).NotTo(HaveOccurred())
		impostor.TLS = &tls.Config{Certificates: []tls.Certificate{selfSigned("127.0.0.62")}}
		impostor.StartTLS()
		defer impostor.Close()
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "impostor"}}
		Expect(admin.Create(ctx, node)).To(Succeed())
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.62"}}
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(impostor.Listener.Addr().(*net.TCPAddr).Port)
		Expect(admin.Status().Update(ctx, node)).To(Succeed())
		Eventually(func() error { err = logsThroughAPIServer(node.Name); return err }).Should(
			MatchError(ContainSubstring("certificate signed by unknown authority")))
		Expect(err.Error()).NotTo(ContainSubstring(`"impostor"`))
	})

	It("denies agent B's request naming agent A's address", func() {
		name := "kubelet-serving-" + agentB.Node + "-stolen-address"
		Expect(asAgent(agentB).Create(ctx, csrFor(name, fleetv1alpha1.KubeletServingSigner,
			"system:node:"+agentB.Node, []string{agentA.Address}, nil))).To(Succeed(), "agent.scope admits it: the operator judges the address")
		expectDenied(name, servingcert.RuleSANs, "the IP "+agentA.Address+", not MacNode "+agentB.Node+"'s spec.address "+agentB.Address)
	})

	It("denies agent B's request naming node A", func() {
		name := "kubelet-serving-" + agentB.Node + "-stolen-name"
		Expect(asAgent(agentB).Create(ctx, csrFor(name, fleetv1alpha1.KubeletServingSigner,
			"system:node:"+agentA.Node, []string{agentB.Address}, nil))).To(Succeed())
		expectDenied(name, servingcert.RuleCommonName, `not "system:node:`+agentB.Node+`"`)
	})

	It("denies agent A's request with an extra DNS name, or an extra IP", func() {
		dns := "kubelet-serving-" + agentA.Node + "-extra-dns"
		Expect(asAgent(agentA).Create(ctx, csrFor(dns, fleetv1alpha1.KubeletServingSigner,
			"system:node:"+agentA.Node, []string{agentA.Address}, []string{"kubernetes.default.svc"}))).To(Succeed())
		expectDenied(dns, servingcert.RuleSANs, `DNS names ["kubernetes.default.svc"]`)

		ip := "kubelet-serving-" + agentA.Node + "-extra-ip"
		Expect(asAgent(agentA).Create(ctx, csrFor(ip, fleetv1alpha1.KubeletServingSigner,
			"system:node:"+agentA.Node, []string{agentA.Address, agentB.Address}, nil))).To(Succeed())
		expectDenied(ip, servingcert.RuleSANs, "not exactly one")
	})

	It("refuses the signer's requests of anyone but an agent: RBAC, agent.scope, then the operator", func() {
		good := func(name string) *certificatesv1.CertificateSigningRequest {
			return csrFor(name, fleetv1alpha1.KubeletServingSigner, "system:node:"+agentA.Node, []string{agentA.Address}, nil)
		}

		By("a tenant: RBAC")
		tenant, err := env.NewTenant(ctx, "mallory")
		Expect(err).NotTo(HaveOccurred())
		harness.ExpectRBACDenial(tenant.Client.Create(ctx, good("kubelet-serving-"+agentA.Node+"-tenant")), "create", "certificatesigningrequests")

		By("another ServiceAccount of the agents' namespace, granted create by mistake: agent.scope")
		grantCreate(rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: harness.AgentsNamespace})
		other, err := env.ClientAsServiceAccount(harness.AgentsNamespace, "default")
		Expect(err).NotTo(HaveOccurred())
		waitAllowed(other)
		harness.ExpectPolicyDenial(other.Create(ctx, good("kubelet-serving-"+agentA.Node+"-other-sa")), "agent.scope")

		By("a user who may create requests: the operator denies it, naming the requester")
		grantCreate(rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "csr-requester"})
		user, err := env.ClientAs("csr-requester")
		Expect(err).NotTo(HaveOccurred())
		waitAllowed(user)
		name := "kubelet-serving-" + agentA.Node + "-user"
		Expect(user.Create(ctx, good(name))).To(Succeed())
		expectDenied(name, servingcert.RuleRequester, `"csr-requester" is not the agent of a node`)
	})

	It("leaves another signer's request alone, and agent.scope keeps agents off other signers", func() {
		By("an agent: agent.scope refuses another signer")
		harness.ExpectPolicyDenial(asAgent(agentA).Create(ctx, csrFor("kubelet-serving-"+agentA.Node+"-cluster-signer",
			"kubernetes.io/kubelet-serving", "system:node:"+agentA.Node, []string{agentA.Address}, nil)), "agent.scope")

		By("the administrator's request of another signer: MacRack neither approves nor denies it")
		other := csrFor("someone-elses", "example.com/serving", "system:node:"+agentA.Node, []string{agentA.Address}, nil)
		Expect(admin.Create(ctx, other)).To(Succeed())
		// A request of MacRack's signer made after it is decided within
		// this wait: the operator is running, and would have seen both.
		control := "kubelet-serving-" + agentA.Node + "-control"
		Expect(asAgent(agentA).Create(ctx, csrFor(control, fleetv1alpha1.KubeletServingSigner,
			"system:node:"+agentA.Node, []string{agentA.Address, agentA.Address}, nil))).To(Succeed())
		expectDenied(control, servingcert.RuleSANs, "not exactly one")
		Consistently(func() certificatesv1.CertificateSigningRequestStatus {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(other), other)).To(Succeed())
			return other.Status
		}, "2s").Should(Equal(certificatesv1.CertificateSigningRequestStatus{}))
	})
})

// grantCreate lets subject create CertificateSigningRequests, as a
// careless cluster administrator might.
func grantCreate(subject rbacv1.Subject) {
	GinkgoHelper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "csr-create-"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"},
			Verbs: []string{"create", "get"}}}}
	Expect(admin.Create(ctx, role)).To(Succeed())
	Expect(admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: "csr-create-"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{subject}})).To(Succeed())
}

func waitAllowed(c client.Client) {
	GinkgoHelper()
	Expect(harness.WaitAllowed(ctx, c, authorizationv1.ResourceAttributes{
		Verb: "create", Group: "certificates.k8s.io", Resource: "certificatesigningrequests"})).To(Succeed())
}
