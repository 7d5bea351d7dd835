package servingcert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

const (
	agentsNS = "macrack-agents"
	nodeA    = "c02aaaaaaaa1"
	nodeB    = "c02bbbbbbbb2"
	addrA    = "10.0.0.9"
	addrB    = "10.0.0.10"
)

var (
	keysOnce sync.Once
	p256Key  *ecdsa.PrivateKey
)

func p256() *ecdsa.PrivateKey {
	keysOnce.Do(func() { p256Key, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader) })
	return p256Key
}

// request is a certificate request's parts; good() is agent A's.
type request struct {
	username string
	key      crypto.Signer
	subject  pkix.Name
	ips      []net.IP
	dns      []string
	emails   []string
	uris     []*url.URL
	usages   []certificatesv1.KeyUsage
	pem      []byte // when set, the request as it is
}

func good() request {
	return request{
		username: "system:serviceaccount:" + agentsNS + ":agent-" + nodeA,
		key:      p256(),
		subject:  pkix.Name{CommonName: "system:node:" + nodeA, Organization: []string{"system:nodes"}},
		ips:      []net.IP{net.ParseIP(addrA)},
		usages:   []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
	}
}

func (r request) csr(t testing.TB) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	data := r.pem
	if data == nil {
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: r.subject, IPAddresses: r.ips, DNSNames: r.dns, EmailAddresses: r.emails, URIs: r.uris,
		}, r.key)
		if err != nil {
			t.Fatal(err)
		}
		data = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "kubelet-serving-" + nodeA + "-0123456789"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: data, SignerName: fleetv1alpha1.KubeletServingSigner, Username: r.username, Usages: r.usages,
		},
	}
}

func chassis(name, address string) *fleetv1alpha1.MacNode {
	return &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: fleetv1alpha1.MacNodeSpec{Address: address}}
}

func fleetOf(nodes ...*fleetv1alpha1.MacNode) MacNodes {
	return func(name string) (*fleetv1alpha1.MacNode, error) {
		for _, n := range nodes {
			if n.Name == name {
				return n, nil
			}
		}
		return nil, nil
	}
}

func TestEachApprovalRuleAloneDenies(t *testing.T) {
	rsa2048, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	fleet := fleetOf(chassis(nodeA, addrA), chassis(nodeB, addrB))
	cases := []struct {
		name  string
		edit  func(*request)
		fleet MacNodes
		// rule is the only rule the request fails; "" approves it.
		rule string
		// says is in the denial's message.
		says string
	}{
		{name: "positive control: agent A for its own address", edit: func(*request) {}},
		{name: "an RSA 2048 key with key encipherment is approved", edit: func(r *request) {
			r.key = rsa2048
			r.usages = append(r.usages, certificatesv1.UsageKeyEncipherment)
		}},
		{name: "a P-384 key is approved", edit: func(r *request) { r.key = p384 }},
		{name: "usages in another order are approved", edit: func(r *request) {
			r.usages = []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth, certificatesv1.UsageDigitalSignature}
		}},

		{name: "a tenant's request", edit: func(r *request) { r.username = "alice" },
			rule: RuleRequester, says: `"alice" is not the agent of a node`},
		{name: "another ServiceAccount of the agents' namespace", edit: func(r *request) { r.username = "system:serviceaccount:" + agentsNS + ":default" },
			rule: RuleRequester},
		{name: "an agent-named ServiceAccount of another namespace", edit: func(r *request) { r.username = "system:serviceaccount:tenant-a:agent-" + nodeA },
			rule: RuleRequester},
		{name: "agent B asking for node A's name", edit: func(r *request) {
			r.username = "system:serviceaccount:" + agentsNS + ":agent-" + nodeB
			r.ips = []net.IP{net.ParseIP(addrB)}
		},
			rule: RuleCommonName, says: `the subject's CN is "system:node:c02aaaaaaaa1", not "system:node:c02bbbbbbbb2"`},
		{name: "a CN that is not a node's", edit: func(r *request) { r.subject.CommonName = nodeA },
			rule: RuleCommonName},
		{name: "the system:masters group", edit: func(r *request) { r.subject.Organization = []string{"system:nodes", "system:masters"} },
			rule: RuleOrganization, says: `"system:masters"`},
		{name: "no organization", edit: func(r *request) { r.subject.Organization = nil },
			rule: RuleOrganization},
		{name: "a chassis not enrolled", edit: func(*request) {}, fleet: fleetOf(chassis(nodeB, addrB)),
			rule: RuleNode, says: "no MacNode c02aaaaaaaa1"},
		{name: "a chassis enrolled without an address", edit: func(*request) {}, fleet: fleetOf(chassis(nodeA, "")),
			rule: RuleNode, says: "has no spec.address"},
		{name: "agent B naming agent A's address", edit: func(r *request) {
			r.username = "system:serviceaccount:" + agentsNS + ":agent-" + nodeB
			r.subject.CommonName = "system:node:" + nodeB
		}, rule: RuleSANs, says: "the IP 10.0.0.9, not MacNode c02bbbbbbbb2's spec.address 10.0.0.10"},
		{name: "an extra DNS name", edit: func(r *request) { r.dns = []string{"kubernetes.default.svc"} },
			rule: RuleSANs, says: `DNS names ["kubernetes.default.svc"]`},
		{name: "an extra IP", edit: func(r *request) { r.ips = append(r.ips, net.ParseIP("10.96.0.1")) },
			rule: RuleSANs, says: `IPs ["10.0.0.9" "10.96.0.1"], not exactly one`},
		{name: "no IP", edit: func(r *request) { r.ips = nil },
			rule: RuleSANs},
		{name: "an email address", edit: func(r *request) { r.emails = []string{"ops@example.com"} },
			rule: RuleSANs},
		{name: "a URI", edit: func(r *request) { r.uris = []*url.URL{{Scheme: "spiffe", Host: "cluster.local", Path: "/ns/x"}} },
			rule: RuleSANs, says: "spiffe://cluster.local/ns/x"},
		{name: "client auth", edit: func(r *request) { r.usages = append(r.usages, certificatesv1.UsageClientAuth) },
			rule: RuleUsages, says: `"client auth"`},
		{name: "no server auth", edit: func(r *request) { r.usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature} },
			rule: RuleUsages},
		{name: "cert sign", edit: func(r *request) { r.usages = append(r.usages, certificatesv1.UsageCertSign) },
			rule: RuleUsages},
		{name: "an RSA 1024 key", edit: func(r *request) { r.key = rsa1024 },
			rule: RuleKey, says: "1024 bits, below 2048"},
		{name: "a P-224 key", edit: func(r *request) { r.key = p224 },
			rule: RuleKey, says: "P-224"},
		{name: "an Ed25519 key", edit: func(r *request) { r.key = ed },
			rule: RuleKey},
		{name: "a request that is no PEM", edit: func(r *request) { r.pem = []byte("hello") },
			rule: RuleRequest, says: "not a PEM CERTIFICATE REQUEST"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := good()
			c.edit(&r)
			f := fleet
			if c.fleet != nil {
				f = c.fleet
			}
			rv, err := Check(r.csr(t), agentsNS, f)
			if err != nil {
				t.Fatal(err)
			}
			if c.rule == "" {
				if !rv.Approved() {
					t.Fatalf("denied: %s", rv.Message())
				}
				return
			}
			if len(rv.Problems) != 1 || rv.Problems[0].Rule != c.rule {
				t.Fatalf("want only the %s rule to fail, got %q", c.rule, rv.Message())
			}
			if !strings.HasPrefix(rv.Message(), c.rule+": ") || !strings.Contains(rv.Message(), c.says) {
				t.Fatalf("the message %q does not name %s and say %q", rv.Message(), c.rule, c.says)
			}
		})
	}
}

// A request signed by another key than the one it names does not prove
// the requester holds the key.
func TestARequestWhoseSignatureDoesNotVerifyIsDenied(t *testing.T) {
	csr := good().csr(t)
	block, _ := pem.Decode(csr.Spec.Request)
	block.Bytes[len(block.Bytes)-3] ^= 0xff
	csr.Spec.Request = pem.EncodeToMemory(block)
	rv, err := Check(csr, agentsNS, fleetOf(chassis(nodeA, addrA)))
	if err != nil {
		t.Fatal(err)
	}
	if rv.Approved() || rv.Problems[0].Rule != RuleRequest {
		t.Fatalf("want the request rule to fail, got %q", rv.Message())
	}
}

func TestEveryFailedRuleIsNamed(t *testing.T) {
	r := good()
	r.username = "system:serviceaccount:" + agentsNS + ":agent-" + nodeB
	r.dns = []string{"evil.example.com"}
	r.usages = append(r.usages, certificatesv1.UsageClientAuth)
	rv, err := Check(r.csr(t), agentsNS, fleetOf(chassis(nodeA, addrA), chassis(nodeB, addrB)))
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, p := range rv.Problems {
		rules = append(rules, p.Rule)
	}
	if got := strings.Join(rules, ","); got != "commonName,subjectAltNames,usages" {
		t.Fatalf("want commonName, subjectAltNames and usages, got %s: %s", got, rv.Message())
	}
}

func TestALookupErrorIsNoDenial(t *testing.T) {
	boom := errors.New("cache down")
	_, err := Check(good().csr(t), agentsNS, func(string) (*fleetv1alpha1.MacNode, error) { return nil, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("want the lookup's error, got %v", err)
	}
}
