package servingcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// The approval rules, by the name a denial gives.
const (
	RuleRequest      = "request"
	RuleRequester    = "requester"
	RuleCommonName   = "commonName"
	RuleOrganization = "organization"
	RuleNode         = "node"
	RuleSANs         = "subjectAltNames"
	RuleUsages       = "usages"
	RuleKey          = "key"
)

const (
	// nodeUserPrefix and nodesGroup are the kubelet's identity in a
	// certificate, as the API server's Node authorizer names it.
	nodeUserPrefix = "system:node:"
	nodesGroup     = "system:nodes"
	minRSABits     = 2048
)

// Problem is one approval rule a request fails, and why.
type Problem struct {
	Rule    string
	Message string
}

func (p Problem) String() string { return p.Rule + ": " + p.Message }

// Review is what Check found of a request.
type Review struct {
	// Node is the requester's node ("" when the requester is no agent).
	Node string
	// Request is the parsed request (nil when it does not parse).
	Request *x509.CertificateRequest
	// Problems are the rules the request fails; none approves it.
	Problems []Problem
}

// Approved holds when the request passes every rule.
func (r Review) Approved() bool { return len(r.Problems) == 0 }

// Message is the denial's message: every failed rule with its values.
func (r Review) Message() string {
	out := make([]string, len(r.Problems))
	for i, p := range r.Problems {
		out[i] = p.String()
	}
	return strings.Join(out, "; ")
}

// MacNodes finds a chassis by name: nil, nil when there is none.
type MacNodes func(name string) (*fleetv1alpha1.MacNode, error)

// Check applies the approval rules to a request of the kubelet serving
// signer. A request passes only when every rule holds:
//
//   - requester: spec.username is the agent of a node,
//     system:serviceaccount:<agentsNamespace>:agent-<node>;
//   - commonName: the subject's CN is system:node:<node>, that same node;
//   - organization: the subject's O is exactly system:nodes;
//   - node: the MacNode <node> exists and has an enrolled spec.address;
//   - subjectAltNames: exactly one IP, the enrolled address, and no DNS
//     name, email address or URI;
//   - usages: digital signature and server auth (key encipherment
//     allowed too), and no other;
//   - key: ECDSA P-256 or P-384, or RSA of at least 2048 bits;
//
// and the request is one PEM CERTIFICATE REQUEST whose signature verifies
// (request). The error is the lookup's only: a failed rule is a Problem.
func Check(csr *certificatesv1.CertificateSigningRequest, agentsNamespace string, macNodes MacNodes) (Review, error) {
	var rv Review
	add := func(rule, format string, args ...any) {
		rv.Problems = append(rv.Problems, Problem{Rule: rule, Message: fmt.Sprintf(format, args...)})
	}

	agentPrefix := "system:serviceaccount:" + agentsNamespace + ":agent-"
	if agentsNamespace != "" && strings.HasPrefix(csr.Spec.Username, agentPrefix) {
		rv.Node = strings.TrimPrefix(csr.Spec.Username, agentPrefix)
	}
	if rv.Node == "" {
		add(RuleRequester, "%q is not the agent of a node (%s<node>)", csr.Spec.Username, agentPrefix)
	}

	req, err := parseRequest(csr.Spec.Request)
	if err != nil {
		add(RuleRequest, "%v", err)
	} else {
		rv.Request = req
		// Without a requester's node, the requester rule has said it all.
		if want := nodeUserPrefix + rv.Node; rv.Node != "" && req.Subject.CommonName != want {
			add(RuleCommonName, "the subject's CN is %q, not %q, the requester's node", req.Subject.CommonName, want)
		}
		if !slices.Equal(req.Subject.Organization, []string{nodesGroup}) {
			add(RuleOrganization, "the subject's O is %q, not exactly [%q]", req.Subject.Organization, nodesGroup)
		}
		if p := keyProblem(req.PublicKey); p != "" {
			add(RuleKey, "%s", p)
		}
	}

	var address netip.Addr
	if rv.Node != "" {
		mn, err := macNodes(rv.Node)
		switch {
		case err != nil:
			return rv, fmt.Errorf("reading MacNode %s: %w", rv.Node, err)
		case mn == nil:
			add(RuleNode, "no MacNode %s", rv.Node)
		case mn.Spec.Address == "":
			add(RuleNode, "MacNode %s has no spec.address", rv.Node)
		default:
			if address, err = netip.ParseAddr(mn.Spec.Address); err != nil {
				add(RuleNode, "MacNode %s's spec.address %q is not an IP", rv.Node, mn.Spec.Address)
			}
		}
	}
	if req != nil {
		if p := sanProblem(req, address, rv.Node); p != "" {
			add(RuleSANs, "%s", p)
		}
	}
	if p := usagesProblem(csr.Spec.Usages); p != "" {
		add(RuleUsages, "%s", p)
	}
	return rv, nil
}

// parseRequest reads exactly one PEM CERTIFICATE REQUEST, whose signature
// verifies: the requester holds the key.
func parseRequest(data []byte) (*x509.CertificateRequest, error) {
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("spec.request is not a PEM CERTIFICATE REQUEST")
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, fmt.Errorf("spec.request holds more than one PEM block")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("spec.request does not parse: %v", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("spec.request's signature does not verify: %v", err)
	}
	return req, nil
}

// keyProblem says why a public key is not one the signer certifies.
func keyProblem(pub any) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Sprintf("an ECDSA key on %s, not P-256 or P-384", k.Curve.Params().Name)
		}
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return fmt.Sprintf("an RSA key of %d bits, below %d", k.N.BitLen(), minRSABits)
		}
	default:
		return fmt.Sprintf("a %T key, not ECDSA P-256/P-384 or RSA of %d bits or more", pub, minRSABits)
	}
	return ""
}

// sanProblem says why the request's subject alternative names are not
// exactly the enrolled address, one IP. address is invalid when the
// node has none, which the node rule reports.
func sanProblem(req *x509.CertificateRequest, address netip.Addr, node string) string {
	var bad []string
	if len(req.DNSNames) > 0 {
		bad = append(bad, fmt.Sprintf("DNS names %q", req.DNSNames))
	}
	if len(req.EmailAddresses) > 0 {
		bad = append(bad, fmt.Sprintf("email addresses %q", req.EmailAddresses))
	}
	if len(req.URIs) > 0 {
		uris := make([]string, len(req.URIs))
		for i, u := range req.URIs {
			uris[i] = u.String()
		}
		bad = append(bad, fmt.Sprintf("URIs %q", uris))
	}
	ips := make([]string, len(req.IPAddresses))
	for i, ip := range req.IPAddresses {
		ips[i] = ip.String()
	}
	want := "the enrolled address"
	if address.IsValid() {
		want = fmt.Sprintf("MacNode %s's spec.address %s", node, address)
	}
	switch {
	case len(req.IPAddresses) != 1:
		bad = append(bad, fmt.Sprintf("IPs %q, not exactly one, %s", ips, want))
	case !address.IsValid():
		// The node rule says why there is no address to compare with.
		if len(bad) == 0 {
			return ""
		}
	default:
		got, ok := netip.AddrFromSlice(req.IPAddresses[0])
		if !ok || got.Unmap() != address.Unmap() {
			bad = append(bad, fmt.Sprintf("the IP %s, not %s", ips[0], want))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return "the request names " + strings.Join(bad, " and ") + "; want exactly one IP, the enrolled address, and nothing else"
}

// usagesProblem says why usages are not a serving certificate's.
func usagesProblem(usages []certificatesv1.KeyUsage) string {
	var have struct{ signature, serverAuth bool }
	var other []string
	for _, u := range usages {
		switch u {
		case certificatesv1.UsageDigitalSignature:
			have.signature = true
		case certificatesv1.UsageServerAuth:
			have.serverAuth = true
		case certificatesv1.UsageKeyEncipherment:
		default:
			other = append(other, string(u))
		}
	}
	if have.signature && have.serverAuth && len(other) == 0 {
		return ""
	}
	got := make([]string, len(usages))
	for i, u := range usages {
		got[i] = string(u)
	}
	return fmt.Sprintf("spec.usages are %q; want exactly %q and %q (%q allowed too)", got,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageKeyEncipherment)
}
