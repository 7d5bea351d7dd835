package servingcert

import (
	"context"
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
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

const node = "c02aaaaaaaa1"

var address = netip.MustParseAddr("10.0.0.9")

// signer stands for the operator: it checks each new request as the
// agent must make it, then denies it or issues a certificate of its CA,
// valid 30 days from the clock's now.
type signer struct {
	t      *testing.T
	cs     *fake.Clientset
	clock  *clocktesting.FakeClock
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey

	mu    sync.Mutex
	seen  []string
	deny  int // how many requests to deny first
	decis chan string
}

func newSigner(t *testing.T, cs *fake.Clientset, clk *clocktesting.FakeClock) *signer {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "serving-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: clk.Now().Add(-time.Hour), NotAfter: clk.Now().Add(10 * 365 * 24 * time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return &signer{t: t, cs: cs, clock: clk, caCert: ca, caKey: key, decis: make(chan string, 16)}
}

func (s *signer) run(ctx context.Context) {
	w, err := s.cs.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Error(err)
		return
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-w.ResultChan():
			if ev.Type != watch.Added {
				continue
			}
			s.decide(ctx, ev.Object.(*certificatesv1.CertificateSigningRequest))
		}
	}
}

func (s *signer) decide(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) {
	if problem := asTheAgentMustAsk(csr); problem != "" {
		s.t.Errorf("request %s: %s", csr.Name, problem)
	}
	s.mu.Lock()
	s.seen = append(s.seen, csr.Name)
	deny := s.deny > 0
	s.deny--
	s.mu.Unlock()
	now := metav1.NewTime(s.clock.Now())
	csrs := s.cs.CertificatesV1().CertificateSigningRequests()
	if deny {
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "Test", Message: "subjectAltNames: no", LastUpdateTime: now})
		if _, err := csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
			s.t.Error(err)
		}
		s.decis <- "denied " + csr.Name
		return
	}
	block, _ := pem.Decode(csr.Spec.Request)
	req, _ := x509.ParseCertificateRequest(block.Bytes)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(s.clock.Now().UnixNano()), Subject: req.Subject, IPAddresses: req.IPAddresses,
		NotBefore: s.clock.Now().Add(-5 * time.Minute), NotAfter: s.clock.Now().Add(time.Duration(*csr.Spec.ExpirationSeconds) * time.Second),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.caCert, req.PublicKey, s.caKey)
	if err != nil {
		s.t.Error(err)
		return
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test", LastUpdateTime: now})
	if csr, err = csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		s.t.Error(err)
		return
	}
	csr.Status.Certificate = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if _, err := csrs.UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		s.t.Error(err)
	}
	s.decis <- "issued " + csr.Name
}

// asTheAgentMustAsk says what of the request the operator's rules would
// refuse.
func asTheAgentMustAsk(csr *certificatesv1.CertificateSigningRequest) string {
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil {
		return "no PEM"
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return err.Error()
	}
	switch {
	case csr.Spec.SignerName != fleetv1alpha1.KubeletServingSigner:
		return "signer " + csr.Spec.SignerName
	case !strings.HasPrefix(csr.Name, "kubelet-serving-"+node+"-"):
		return "name " + csr.Name
	case req.Subject.CommonName != "system:node:"+node || fmt.Sprint(req.Subject.Organization) != "[system:nodes]":
		return "subject " + req.Subject.String()
	case len(req.IPAddresses) != 1 || req.IPAddresses[0].String() != address.String() || len(req.DNSNames)+len(req.EmailAddresses)+len(req.URIs) != 0:
		return fmt.Sprintf("SANs %v %v", req.IPAddresses, req.DNSNames)
	case fmt.Sprint(csr.Spec.Usages) != "[digital signature server auth]":
		return fmt.Sprint("usages ", csr.Spec.Usages)
	case csr.Spec.ExpirationSeconds == nil || *csr.Spec.ExpirationSeconds != 30*24*3600:
		return "expirationSeconds"
	}
	if k, ok := req.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		return "not a P-256 key"
	}
	return ""
}

// newClientset is a fake clientset whose CertificateSigningRequests
// honour the metadata.name field selector, as the API server does:
// the fake's own ignore field selectors.
func newClientset() *fake.Clientset {
	cs := fake.NewClientset()
	gvr := certificatesv1.SchemeGroupVersion.WithResource("certificatesigningrequests")
	named := func(sel fields.Selector, obj runtime.Object) bool {
		m, err := meta.Accessor(obj)
		return err == nil && sel.Matches(fields.Set{"metadata.name": m.GetName()})
	}
	cs.PrependReactor("list", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sel := a.(k8stesting.ListActionImpl).GetListRestrictions().Fields
		obj, err := cs.Tracker().List(gvr, certificatesv1.SchemeGroupVersion.WithKind("CertificateSigningRequest"), "")
		if err != nil || sel == nil || sel.Empty() {
			return true, obj, err
		}
		list := obj.(*certificatesv1.CertificateSigningRequestList)
		var keep []certificatesv1.CertificateSigningRequest
		for _, item := range list.Items {
			if named(sel, &item) {
				keep = append(keep, item)
			}
		}
		list.Items = keep
		return true, list, nil
	})
	cs.PrependWatchReactor("certificatesigningrequests", func(a k8stesting.Action) (bool, watch.Interface, error) {
		impl := a.(k8stesting.WatchActionImpl)
		w, err := cs.Tracker().Watch(gvr, "", impl.ListOptions)
		if err != nil {
			return true, nil, err
		}
		sel := impl.GetWatchRestrictions().Fields
		if sel == nil || sel.Empty() {
			return true, w, nil
		}
		return true, watch.Filter(w, func(e watch.Event) (watch.Event, bool) { return e, named(sel, e.Object) }), nil
	})
	return cs
}

func newRequester(t *testing.T, cs *fake.Clientset, clk *clocktesting.FakeClock, dir string) *Requester {
	return &Requester{Client: cs, NodeName: node, Address: address, Dir: dir, Clock: clk, Log: testr.New(t), Retry: time.Minute}
}

func run(t *testing.T, r *Requester) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func servedName(t *testing.T, r *Requester) string {
	t.Helper()
	c, err := r.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%s until %s", c.Leaf.SerialNumber, c.Leaf.NotAfter)
}

// stepUntilDecided steps the clock by step once ready holds and the
// requester waits on the clock, and returns the signer's next decision.
func stepUntilDecided(clk *clocktesting.FakeClock, s *signer, step time.Duration, ready func() bool) string {
	stepped := false
	for {
		select {
		case d := <-s.decis:
			return d
		case <-time.After(50 * time.Millisecond):
		}
		if !stepped && ready() && clk.HasWaiters() {
			clk.Step(step)
			stepped = true
		}
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// The agent asks, waits serving none (the self-signed fallback), serves
// what is issued, keeps it in its state directory 0600, renews it with a
// new key at two thirds of its life, and serves the stored one at once
// after a restart.
func TestObtainServeRenewAndRestart(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	cs := newClientset()
	s := newSigner(t, cs, clk)
	dir := t.TempDir()
	r := newRequester(t, cs, clk, dir)
	if servedName(t, r) != "" {
		t.Fatal("a certificate before any was issued")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.run(ctx)
	eventually(t, "the signer's watch", func() bool { return len(cs.Actions()) > 0 })
	run(t, r)

	if d := <-s.decis; !strings.HasPrefix(d, "issued ") {
		t.Fatal(d)
	}
	eventually(t, "the issued certificate is served", func() bool { return servedName(t, r) != "" })
	first := servedName(t, r)
	firstCert := r.Current()
	roots := x509.NewCertPool()
	roots.AddCert(s.caCert)
	if _, err := firstCert.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: address.String(), CurrentTime: clk.Now()}); err != nil {
		t.Fatalf("the served certificate does not verify for %s: %v", address, err)
	}
	for _, f := range []string{pairFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: want 0600, got %v, %v", f, st, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, requestKeyFile)); !os.IsNotExist(err) {
		t.Fatalf("the request key outlived its request: %v", err)
	}

	// Renewal: nothing before two thirds of the life, a new request then.
	eventually(t, "the requester sleeps until renewal", clk.HasWaiters)
	clk.Step(19 * 24 * time.Hour)
	select {
	case d := <-s.decis:
		t.Fatalf("renewed before two thirds of the life: %s", d)
	case <-time.After(200 * time.Millisecond):
	}
	if d := stepUntilDecided(clk, s, 2*24*time.Hour, func() bool { return true }); !strings.HasPrefix(d, "issued ") {
		t.Fatal(d)
	}
	eventually(t, "the renewed certificate is served", func() bool { return servedName(t, r) != first })
	s.mu.Lock()
	names := append([]string(nil), s.seen...)
	s.mu.Unlock()
	if len(names) != 2 || names[0] == names[1] {
		t.Fatalf("want two requests of two keys, got %q", names)
	}
	if r.Current().PrivateKey.(*ecdsa.PrivateKey).Equal(firstCert.PrivateKey) {
		t.Fatal("renewed with the same key")
	}

	// Restart: the stored certificate serves before anything is asked.
	again := newRequester(t, cs, clk, dir)
	run(t, again)
	eventually(t, "the stored certificate is served after a restart", func() bool { return servedName(t, again) == servedName(t, r) })
	select {
	case d := <-s.decis:
		t.Fatalf("a restart asked again: %s", d)
	case <-time.After(200 * time.Millisecond):
	}
}

// A denied request takes its key with it: the next has a new key and a
// new name, and is issued.
func TestADeniedRequestIsMadeAgainWithANewKey(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	cs := newClientset()
	s := newSigner(t, cs, clk)
	s.deny = 1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.run(ctx)
	eventually(t, "the signer's watch", func() bool { return len(cs.Actions()) > 0 })
	r := newRequester(t, cs, clk, t.TempDir())
	run(t, r)
	if d := <-s.decis; !strings.HasPrefix(d, "denied ") {
		t.Fatal(d)
	}
	if servedName(t, r) != "" {
		t.Fatal("serving a certificate of a denied request")
	}
	// The retry is a minute later, on the clock.
	if d := stepUntilDecided(clk, s, time.Minute, func() bool {
		// Dropped with the denial, before the retry waits on the clock;
		// until then, the wait for the signer does.
		_, err := os.Stat(filepath.Join(r.Dir, requestKeyFile))
		return os.IsNotExist(err)
	}); !strings.HasPrefix(d, "issued ") {
		t.Fatal(d)
	}
	eventually(t, "the second request's certificate is served", func() bool { return servedName(t, r) != "" })
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen) != 2 || s.seen[0] == s.seen[1] {
		t.Fatalf("want two requests of two keys, got %q", s.seen)
	}
}

// A certificate stored for another address is not served: the chassis
// moved.
func TestAStoredCertificateOfAnotherAddressIsNotServed(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	dir := t.TempDir()
	r := newRequester(t, newClientset(), clk, dir)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), NotBefore: clk.Now().Add(-time.Hour), NotAfter: clk.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("10.0.0.10")}}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	keyDER, _ := x509.MarshalECPrivateKey(key)
	pair := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
	if err := writeFile(filepath.Join(dir, pairFile), pair); err != nil {
		t.Fatal(err)
	}
	if c, err := r.loadPair(); c != nil || err == nil || !strings.Contains(err.Error(), "not 10.0.0.9") {
		t.Fatalf("want the stored certificate refused for its address, got %v, %v", c, err)
	}
}

func TestTheNameIsOfTheKeyAndTheAddress(t *testing.T) {
	k1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	a, _ := Name(node, k1.Public(), address)
	b, _ := Name(node, k1.Public(), address)
	c, _ := Name(node, k2.Public(), address)
	d, _ := Name(node, k1.Public(), netip.MustParseAddr("10.0.0.10"))
	if a != b || a == c || a == d || !strings.HasPrefix(a, "kubelet-serving-"+node+"-") || len(a) != len("kubelet-serving-"+node+"-")+16 {
		t.Fatalf("names %q %q %q %q", a, b, c, d)
	}
}
