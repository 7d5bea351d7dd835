package servingcert

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

func newCA(t testing.TB, notAfter time.Time) (*CA, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-kubelet-serving-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	ca, err := ParseCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return ca, certPEM, keyPEM
}

type fixture struct {
	r      *Reconciler
	c      client.Client
	clock  *clocktesting.FakeClock
	events *events.FakeRecorder
}

func newFixture(t *testing.T, objs ...client.Object) fixture {
	t.Helper()
	scheme, err := macrackscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&certificatesv1.CertificateSigningRequest{}).Build()
	ca, _, _ := newCA(t, time.Now().Add(365*24*time.Hour))
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	rec := events.NewFakeRecorder(16)
	return fixture{r: &Reconciler{Client: c, CA: ca, AgentsNamespace: agentsNS, Clock: clk, Recorder: rec}, c: c, clock: clk, events: rec}
}

func (f fixture) reconcile(t *testing.T, name string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	if _, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Name: name}, csr); err != nil {
		t.Fatal(err)
	}
	return csr
}

func condition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequestCondition {
	for i := range csr.Status.Conditions {
		if csr.Status.Conditions[i].Type == t {
			return &csr.Status.Conditions[i]
		}
	}
	return nil
}

func TestAgentsRequestForItsOwnAddressIsApprovedAndSigned(t *testing.T) {
	csr := good().csr(t)
	csr.Spec.ExpirationSeconds = ptr.To(int32(3600))
	f := newFixture(t, csr, chassis(nodeA, addrA))
	got := f.reconcile(t, csr.Name)
	if c := condition(got, certificatesv1.CertificateApproved); c == nil || c.Reason != ReasonApproved || !c.LastUpdateTime.Time.Equal(f.clock.Now()) {
		t.Fatalf("want Approved at the clock's time, got %+v", got.Status.Conditions)
	}
	block, _ := pem.Decode(got.Status.Certificate)
	if block == nil {
		t.Fatalf("no certificate issued: %+v", got.Status)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(f.r.CA.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: addrA, CurrentTime: f.clock.Now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("the certificate does not verify for %s against the CA: %v", addrA, err)
	}
	if !cert.NotBefore.Equal(f.clock.Now().Add(-5*time.Minute)) || !cert.NotAfter.Equal(f.clock.Now().Add(time.Hour)) {
		t.Fatalf("want valid from now-5m for the hour asked, got %s to %s", cert.NotBefore, cert.NotAfter)
	}
	if cert.IsCA || cert.Subject.CommonName != "system:node:"+nodeA || len(cert.DNSNames) != 0 || len(cert.IPAddresses) != 1 {
		t.Fatalf("want a leaf for system:node:%s and one IP, got %+v", nodeA, cert)
	}
	want := []string{"Normal MacRackAgentOwnAddress", "Normal CertificateIssued"}
	for _, w := range want {
		if e := <-f.events.Events; !strings.HasPrefix(e, w) {
			t.Fatalf("want an Event %q, got %q", w, e)
		}
	}
}

func TestValidityIsAtMostThirtyDays(t *testing.T) {
	for _, c := range []struct {
		seconds *int32
		want    time.Duration
	}{
		{nil, MaxValidity},
		{ptr.To(int32(600)), 10 * time.Minute},
		{ptr.To(int32(90 * 24 * 3600)), MaxValidity},
	} {
		csr := good().csr(t)
		csr.Spec.ExpirationSeconds = c.seconds
		if got := Validity(csr); got != c.want {
			t.Errorf("expirationSeconds %v: want %s, got %s", c.seconds, c.want, got)
		}
	}
	// Never past the CA's own end.
	ca, _, _ := newCA(t, time.Now().Add(48*time.Hour))
	csr := good().csr(t)
	rv, _ := Check(csr, agentsNS, fleetOf(chassis(nodeA, addrA)))
	der, err := ca.Sign(csr, rv.Request, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(der)
	cert, _ := x509.ParseCertificate(block.Bytes)
	if !cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Fatalf("want the CA's end %s, got %s", ca.Cert.NotAfter, cert.NotAfter)
	}
}

func TestAnExpiredCASignsNothing(t *testing.T) {
	ca, _, _ := newCA(t, time.Now().Add(-time.Minute))
	csr := good().csr(t)
	rv, _ := Check(csr, agentsNS, fleetOf(chassis(nodeA, addrA)))
	if _, err := ca.Sign(csr, rv.Request, time.Now()); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("want an expired CA to refuse, got %v", err)
	}
}

func TestAnotherAgentsAddressIsDeniedNamingTheRule(t *testing.T) {
	r := good()
	r.username = "system:serviceaccount:" + agentsNS + ":agent-" + nodeB
	r.subject.CommonName = "system:node:" + nodeB
	csr := r.csr(t)
	f := newFixture(t, csr, chassis(nodeA, addrA), chassis(nodeB, addrB))
	got := f.reconcile(t, csr.Name)
	c := condition(got, certificatesv1.CertificateDenied)
	if c == nil || c.Reason != ReasonDenied || !strings.Contains(c.Message, "subjectAltNames: the request names the IP 10.0.0.9, not MacNode c02bbbbbbbb2's spec.address 10.0.0.10") {
		t.Fatalf("want Denied naming the subjectAltNames rule, got %+v", got.Status.Conditions)
	}
	if len(got.Status.Certificate) != 0 || condition(got, certificatesv1.CertificateApproved) != nil {
		t.Fatal("a denied request was approved or signed")
	}
	if e := <-f.events.Events; !strings.HasPrefix(e, "Warning MacRackRulesFailed") {
		t.Fatalf("want a Warning Event, got %q", e)
	}
	// Decided once: a second pass writes nothing.
	rv := got.ResourceVersion
	if again := f.reconcile(t, csr.Name); again.ResourceVersion != rv {
		t.Fatal("a decided request was written again")
	}
}

func TestARequestOfAnotherSignerIsLeftAlone(t *testing.T) {
	csr := good().csr(t)
	csr.Spec.SignerName = "kubernetes.io/kubelet-serving"
	f := newFixture(t, csr, chassis(nodeA, addrA))
	got := f.reconcile(t, csr.Name)
	if len(got.Status.Conditions) != 0 || len(got.Status.Certificate) != 0 {
		t.Fatalf("MacRack decided another signer's request: %+v", got.Status)
	}
	if IsServingRequest(got) {
		t.Fatal("the watch's predicate selects another signer's request")
	}
}

// Someone else's approval does not make the CA sign what the rules refuse.
func TestAnApprovalByOthersOfAFailingRequestIsNotSigned(t *testing.T) {
	r := good()
	r.dns = []string{"kubernetes.default.svc"}
	csr := r.csr(t)
	csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "KubectlApprove", LastUpdateTime: metav1.Now()}}
	f := newFixture(t, csr, chassis(nodeA, addrA))
	got := f.reconcile(t, csr.Name)
	if c := condition(got, certificatesv1.CertificateFailed); c == nil || !strings.Contains(c.Message, "subjectAltNames") {
		t.Fatalf("want Failed naming subjectAltNames, got %+v", got.Status.Conditions)
	}
	if len(got.Status.Certificate) != 0 {
		t.Fatal("signed a request the rules refuse")
	}
	// Positive control: approved by someone else and passing, it is signed.
	ok := good().csr(t)
	ok.Name = "kubelet-serving-ok"
	ok.Status.Conditions = csr.Status.Conditions
	f = newFixture(t, ok, chassis(nodeA, addrA))
	if got := f.reconcile(t, ok.Name); len(got.Status.Certificate) == 0 {
		t.Fatalf("an approved request that passes was not signed: %+v", got.Status)
	}
}

func TestParseCARefusesALeafAndAForeignKey(t *testing.T) {
	_, certPEM, _ := newCA(t, time.Now().Add(time.Hour))
	_, _, otherKey := newCA(t, time.Now().Add(time.Hour))
	if _, err := ParseCA(certPEM, otherKey); err == nil || !strings.Contains(err.Error(), "is not the key of") {
		t.Fatalf("want a key mismatch, got %v", err)
	}
	f := newFixture(t)
	csr := good().csr(t)
	rv, _ := Check(csr, agentsNS, fleetOf(chassis(nodeA, addrA)))
	leaf, err := f.r.CA.Sign(csr, rv.Request, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(p256())
	if _, err := ParseCA(leaf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Fatalf("want a leaf refused as CA, got %v", err)
	}
}
