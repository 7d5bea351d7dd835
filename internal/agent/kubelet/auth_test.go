package kubelet

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestRequestAttributes: the kubelet's attributes, but a streaming path
// needs create whatever the method.
func TestRequestAttributes(t *testing.T) {
	cases := []struct {
		method, path, verb, subresource string
	}{
		// A WebSocket exec is a GET: it must need create.
		{"GET", "/exec/ns/pod/macos", "create", "proxy"},
		{"POST", "/exec/ns/pod/macos", "create", "proxy"},
		{"GET", "/exec/ns/pod/uid/macos", "create", "proxy"},
		{"HEAD", "/exec/ns/pod/macos", "create", "proxy"},
		{"PUT", "/exec/ns/pod/macos", "create", "proxy"},
		{"GET", "/attach/ns/pod/macos", "create", "proxy"},
		{"GET", "/portForward/ns/pod", "create", "proxy"},
		{"POST", "/portForward/ns/pod/uid", "create", "proxy"},
		{"DELETE", "/run/ns/pod/macos", "create", "proxy"},
		{"GET", "/exec", "create", "proxy"},
		// Not a streaming path: a name that only starts like one.
		{"GET", "/execute/ns/pod", "get", "proxy"},
		{"GET", "/containerLogs/ns/pod/macos", "get", "proxy"},
		{"GET", "/healthz", "get", "proxy"},
		{"GET", "/pods", "get", "proxy"},
		{"POST", "/pods", "create", "proxy"},
		{"PUT", "/configz", "update", "proxy"},
		{"PATCH", "/configz", "patch", "proxy"},
		{"DELETE", "/pods/x", "delete", "proxy"},
		{"OPTIONS", "/healthz", "", "proxy"},
		{"GET", "/stats", "get", "stats"},
		{"GET", "/stats/summary", "get", "stats"},
		{"GET", "/statsfoo", "get", "proxy"},
		{"GET", "/metrics", "get", "metrics"},
		{"GET", "/metrics/cadvisor", "get", "metrics"},
		{"GET", "/logs/", "get", "log"},
		{"GET", "/logs/syslog", "get", "log"},
		{"GET", "/spec/", "get", "spec"},
	}
	u := &user.DefaultInfo{Name: "alice"}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			r := httptest.NewRequest(c.method, c.path+"?command=secret", nil)
			a := requestAttributes(node, u, r)
			if a.Verb != c.verb || a.Subresource != c.subresource {
				t.Fatalf("verb %q subresource %q; want %q %q", a.Verb, a.Subresource, c.verb, c.subresource)
			}
			if a.Resource != "nodes" || a.Name != node || a.APIVersion != "v1" || a.APIGroup != "" || a.Namespace != "" ||
				!a.ResourceRequest || a.Path != c.path || a.User != u {
				t.Fatalf("attributes %+v", a)
			}
		})
	}
}

// testCA is a CA that signs client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// client issues a client certificate for cn, in groups.
func (ca *testCA) client(t *testing.T, cn string, groups ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn, Organization: groups},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// fakeAPIServer answers TokenReviews (the token "bob-token" is bob) and
// SubjectAccessReviews (alice and bob may get nodes/proxy of node), and
// records the reviews of access.
type fakeAPIServer struct {
	*httptest.Server
	mu   sync.Mutex
	sars []authorizationv1.SubjectAccessReviewSpec
}

func newFakeAPIServer(t *testing.T) *fakeAPIServer {
	f := &fakeAPIServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", func(w http.ResponseWriter, r *http.Request) {
		var tr authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if tr.Spec.Token == "bob-token" {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "bob"}}
		}
		tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(tr)
	})
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/subjectaccessreviews", func(w http.ResponseWriter, r *http.Request) {
		var sar authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.sars = append(f.sars, sar.Spec)
		f.mu.Unlock()
		ra := sar.Spec.ResourceAttributes
		sar.Status.Allowed = ra != nil && (sar.Spec.User == "alice" || sar.Spec.User == "bob") &&
			ra.Verb == "get" && ra.Resource == "nodes" && ra.Subresource == "proxy" && ra.Name == node
		sar.APIVersion, sar.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(sar)
	})
	f.Server = httptest.NewTLSServer(mux)
	t.Cleanup(f.Close)
	return f
}

// TestDelegatingAuthentication: Run's own authentication and
// authorization, built from a client CA file and the review clients,
// over TLS: a certificate from the CA is its CN, one from another CA is
// nobody, a token is whom its TokenReview says, and every request is a
// SubjectAccessReview on nodes/proxy of the node.
func TestDelegatingAuthentication(t *testing.T) {
	good, other := newTestCA(t, "client-ca"), newTestCA(t, "other-ca")
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	if err := os.WriteFile(caFile, good.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	api := newFakeAPIServer(t)
	reviews, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})}})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logLines{}
	s := &Server{
		NodeName: node, Addr: "127.0.0.1:0", ClientCAFile: caFile, Reviews: reviews,
		Resolver: CacheResolver{Reader: serverWorld().reader(t), NodeName: node},
		Guests:   &fakeGuests{}, Log: logs.logger(),
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs)
		}
	}()

	do := func(t *testing.T, method, path, token string, certs ...tls.Certificate) (int, string) {
		t.Helper()
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
			// The serving certificate is self-signed, in memory; its
			// names are checked below.
			InsecureSkipVerify: true, //nolint:gosec
			Certificates:       certs,
		}}}
		defer c.CloseIdleConnections()
		req, err := http.NewRequest(method, "https://"+ln.Addr().String()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		leaf := resp.TLS.PeerCertificates[0]
		if !slices.ContainsFunc(leaf.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }) ||
			!slices.Contains(leaf.DNSNames, node) {
			t.Errorf("serving certificate for %v %v; want 127.0.0.1 and %s", leaf.IPAddresses, leaf.DNSNames, node)
		}
		return resp.StatusCode, strings.TrimSpace(readAll(t, resp))
	}

	for _, c := range []struct {
		name         string
		method, path string
		token        string
		certs        []tls.Certificate
		code         int
		body         string
	}{
		{"certificate from the client CA", "GET", "/healthz", "", []tls.Certificate{good.client(t, "alice", "team")}, 200, "ok"},
		{"certificate from another CA", "GET", "/healthz", "", []tls.Certificate{other.client(t, "alice", "team")}, 401, "Unauthorized"},
		{"no credentials", "GET", "/healthz", "", nil, 401, "Unauthorized"},
		{"token its review accepts", "GET", "/healthz", "bob-token", nil, 200, "ok"},
		{"token its review refuses", "GET", "/healthz", "eve-token", nil, 401, "Unauthorized"},
		{"certificate of a user without the verb", "GET", "/healthz", "", []tls.Certificate{good.client(t, "carol")}, 403,
			"Forbidden (user=carol, verb=get, resource=nodes, subresource=proxy)"},
		{"a get-only user's exec", "GET", "/exec/tenant-a/vm-a/macos?command=sh&output=1", "", []tls.Certificate{good.client(t, "alice")}, 403,
			"Forbidden (user=alice, verb=create, resource=nodes, subresource=proxy)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := do(t, c.method, c.path, c.token, c.certs...)
			if code != c.code || body != c.body {
				t.Fatalf("%d %q; want %d %q", code, body, c.code, c.body)
			}
		})
	}

	api.mu.Lock()
	defer api.mu.Unlock()
	i := slices.IndexFunc(api.sars, func(s authorizationv1.SubjectAccessReviewSpec) bool { return s.User == "alice" })
	if i < 0 {
		t.Fatalf("no SubjectAccessReview for alice in %+v", api.sars)
	}
	sar := api.sars[i]
	if !slices.Contains(sar.Groups, "team") || !slices.Contains(sar.Groups, user.AllAuthenticated) {
		t.Errorf("alice's groups %v; want team and %s", sar.Groups, user.AllAuthenticated)
	}
	if ra := sar.ResourceAttributes; ra == nil || ra.Resource != "nodes" || ra.Name != node || ra.Subresource != "proxy" || ra.Verb != "get" {
		t.Errorf("alice's review %+v", sar.ResourceAttributes)
	}
}
