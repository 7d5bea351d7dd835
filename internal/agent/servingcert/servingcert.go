// Package servingcert obtains the host agent's kubelet serving certificate
// from the cluster: a CertificateSigningRequest of the signer
// macrack.io/kubelet-serving for system:node:<node>, in system:nodes, with
// exactly one IP SAN, the address the kubelet API serves on (the chassis'
// enrolled address, which the operator publishes as the Node's only
// InternalIP). The operator approves and signs it with the CA the API
// server verifies kubelets with (--kubelet-certificate-authority), and
// only for the agent's own Node and address.
//
// The key is ECDSA P-256, made on the host and kept in the state
// directory (0600); it never leaves the host. Until the certificate is
// issued, GetCertificate returns none and the kubelet API serves its
// self-signed one, which such an API server refuses. The certificate is
// renewed, with a new key, at two thirds of its life.
package servingcert

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/utils/clock"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

const (
	// DefaultValidity is the lifetime asked for: the signer's most.
	DefaultValidity = 30 * 24 * time.Hour
	// DefaultWait is how long one wait for the signer lasts before the
	// agent logs again that it still waits.
	DefaultWait = 5 * time.Minute
	// DefaultRetry is how soon a denied or failed request is made again,
	// with a new key.
	DefaultRetry = time.Minute

	// pairFile holds the served certificate and its key; requestKeyFile
	// the key of the request outstanding.
	pairFile       = "kubelet-serving.pem"
	requestKeyFile = "kubelet-serving-request.key"
)

// Requester obtains and renews the kubelet serving certificate, and holds
// it for the kubelet API's handshakes.
type Requester struct {
	// Client creates and watches the CertificateSigningRequests.
	Client   kubernetes.Interface
	NodeName string
	// Address is the IP the kubelet API serves on: the one IP SAN.
	Address netip.Addr
	// Dir holds the key and the certificate (the agent's state directory).
	Dir string
	// Validity is the lifetime asked for (DefaultValidity if zero).
	Validity time.Duration
	// Wait and Retry: DefaultWait and DefaultRetry if zero.
	Wait, Retry time.Duration
	Clock       clock.WithTicker
	Log         logr.Logger

	mu   sync.RWMutex
	cert *tls.Certificate
}

// GetCertificate is the certificate the cluster signed, while it is valid;
// none before, so that the server's own certificate serves.
func (r *Requester) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := r.Current()
	if c == nil || !r.Clock.Now().Before(c.Leaf.NotAfter) {
		return nil, nil
	}
	return c, nil
}

// Current is the certificate the cluster signed last, if any.
func (r *Requester) Current() *tls.Certificate {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.cert
}

func (r *Requester) set(c *tls.Certificate) {
	r.mu.Lock()
	r.cert = c
	r.mu.Unlock()
}

// Name is the request's name for a key and an address:
// kubelet-serving-<node>-<hash>. The same key and address give the same
// name, so that an agent started again waits for the request it made.
func Name(node string, pub crypto.PublicKey, address netip.Addr) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(der)
	h.Write([]byte{0})
	h.Write([]byte(address.String()))
	return "kubelet-serving-" + node + "-" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Run serves the stored certificate if it is still good, and obtains one
// whenever there is none or the one served is at two thirds of its life,
// until ctx ends.
func (r *Requester) Run(ctx context.Context) error {
	if r.NodeName == "" || !r.Address.IsValid() || r.Address.IsUnspecified() || r.Dir == "" || r.Client == nil || r.Clock == nil {
		return fmt.Errorf("kubelet serving certificate: the node, a specific address, the state directory, a client and a clock are required")
	}
	if c, err := r.loadPair(); err != nil {
		r.Log.Info("Not serving the stored kubelet serving certificate", "reason", err.Error())
	} else if c != nil {
		r.set(c)
		r.Log.Info("Serving the stored kubelet serving certificate", "notAfter", c.Leaf.NotAfter, "renewAt", renewAt(c.Leaf))
	}
	for {
		if c := r.Current(); c != nil {
			if d := renewAt(c.Leaf).Sub(r.Clock.Now()); d > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-r.Clock.After(d):
				}
			}
			r.Log.Info("Renewing the kubelet serving certificate", "notAfter", c.Leaf.NotAfter)
		}
		err := r.obtain(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			continue
		}
		retry := r.retry()
		r.Log.Error(err, "Obtaining the kubelet serving certificate failed; trying again", "in", retry.String(),
			"serving", r.serving())
		select {
		case <-ctx.Done():
			return nil
		case <-r.Clock.After(retry):
		}
	}
}

// renewAt is two thirds into the certificate's life.
func renewAt(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}

func (r *Requester) retry() time.Duration {
	if r.Retry > 0 {
		return r.Retry
	}
	return DefaultRetry
}

// serving says which certificate the kubelet API presents now.
func (r *Requester) serving() string {
	if c := r.Current(); c != nil && r.Clock.Now().Before(c.Leaf.NotAfter) {
		return "the certificate the cluster signed, until " + c.Leaf.NotAfter.UTC().Format(time.RFC3339)
	}
	return "a self-signed certificate, which an API server with --kubelet-certificate-authority refuses"
}

// obtain makes (or finds again) the request for the outstanding key,
// waits until it is issued, and serves the certificate. A denied or
// failed request takes its key with it: the next one has a new key, and
// so a new name.
func (r *Requester) obtain(ctx context.Context) error {
	key, err := r.requestKey()
	if err != nil {
		return err
	}
	name, err := Name(r.NodeName, key.Public(), r.Address)
	if err != nil {
		return err
	}
	req, err := r.request(ctx, name, key)
	if err != nil {
		return err
	}
	if done, err := r.decided(req); done {
		return err
	}
	r.Log.Info("Waiting for the kubelet serving certificate: the MacRack operator approves and signs an agent's request for its own Node and enrolled address, when it runs with --kubelet-serving-ca-cert-file; the kubelet API serves a self-signed certificate until then",
		"csr", name, "signer", fleetv1alpha1.KubeletServingSigner, "address", r.Address.String(), "serving", r.serving())
	started := r.Clock.Now()
	var data []byte
	for {
		data, err = r.waitOnce(ctx, name, req)
		if err == nil || ctx.Err() != nil || !wait.Interrupted(err) {
			break
		}
		r.Log.Info("Still waiting for the kubelet serving certificate; is the operator's kubelet serving CA set, and this chassis' spec.address the kubelet address?",
			"csr", name, "waited", r.Clock.Since(started).Round(time.Second).String(), "serving", r.serving())
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Denied or failed: the next request has a new key.
		if cur, gerr := r.Client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{}); gerr == nil {
			if done, derr := r.decided(cur); done {
				return derr
			}
		}
		return fmt.Errorf("waiting for %s: %w", name, err)
	}
	return r.take(name, key, data)
}

// waitOnce waits for the request's certificate for at most Wait.
func (r *Requester) waitOnce(ctx context.Context, name string, req *certificatesv1.CertificateSigningRequest) ([]byte, error) {
	d := r.Wait
	if d <= 0 {
		d = DefaultWait
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := r.Clock.NewTimer(d)
	defer t.Stop()
	go func() {
		select {
		case <-t.C():
			cancel()
		case <-wctx.Done():
		}
	}()
	return csr.WaitForCertificate(wctx, r.Client, name, req.UID)
}

// decided reports whether the request was denied or failed, and then
// drops its key, or issued, and then serves its certificate.
func (r *Requester) decided(req *certificatesv1.CertificateSigningRequest) (bool, error) {
	for _, c := range req.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		if c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
			r.dropRequestKey()
			return true, fmt.Errorf("the kubelet serving certificate request %s is %s (%s): %s", req.Name, c.Type, c.Reason, c.Message)
		}
	}
	return false, nil
}

// request creates the request, or finds the one this key made already.
func (r *Requester) request(ctx context.Context, name string, key crypto.Signer) (*certificatesv1.CertificateSigningRequest, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:" + r.NodeName, Organization: []string{"system:nodes"}},
		IPAddresses: []net.IP{r.Address.AsSlice()},
	}, key)
	if err != nil {
		return nil, err
	}
	validity := r.Validity
	if validity <= 0 {
		validity = DefaultValidity
	}
	want := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:           pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName:        fleetv1alpha1.KubeletServingSigner,
			Usages:            []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
			ExpirationSeconds: csr.DurationToExpirationSeconds(validity),
		},
	}
	csrs := r.Client.CertificatesV1().CertificateSigningRequests()
	created, err := csrs.Create(ctx, want, metav1.CreateOptions{})
	if err == nil {
		r.Log.Info("Requested a kubelet serving certificate", "csr", name, "address", r.Address.String(), "validity", validity.String())
		return created, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating the kubelet serving certificate request %s: %w", name, err)
	}
	found, err := csrs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the kubelet serving certificate request %s: %w", name, err)
	}
	if err := ours(found, key.Public()); err != nil {
		r.dropRequestKey()
		return nil, fmt.Errorf("the kubelet serving certificate request %s is not this key's: %w", name, err)
	}
	return found, nil
}

// ours checks that a request found by name is of this signer and this key.
func ours(found *certificatesv1.CertificateSigningRequest, pub crypto.PublicKey) error {
	if found.Spec.SignerName != fleetv1alpha1.KubeletServingSigner {
		return fmt.Errorf("its signer is %q", found.Spec.SignerName)
	}
	block, _ := pem.Decode(found.Spec.Request)
	if block == nil {
		return errors.New("its request is not PEM")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return err
	}
	if k, ok := req.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(pub) {
		return errors.New("it names another key")
	}
	return nil
}

// take checks the issued certificate, stores it with its key, and serves
// it.
func (r *Requester) take(name string, key *ecdsa.PrivateKey, data []byte) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pair := append(pemCertificates(data), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
	c, err := r.parsePair(pair)
	if err != nil {
		r.dropRequestKey()
		return fmt.Errorf("the certificate issued for %s: %w", name, err)
	}
	if err := writeFile(filepath.Join(r.Dir, pairFile), pair); err != nil {
		return err
	}
	r.dropRequestKey()
	r.set(c)
	r.Log.Info("Serving the kubelet API with the certificate the cluster signed", "csr", name,
		"notAfter", c.Leaf.NotAfter, "renewAt", renewAt(c.Leaf))
	return nil
}

// pemCertificates keeps the CERTIFICATE blocks of data.
func pemCertificates(data []byte) []byte {
	var out []byte
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		if b.Type == "CERTIFICATE" {
			out = append(out, pem.EncodeToMemory(b)...)
		}
	}
}

// parsePair is a certificate and key for the kubelet API: valid now, for
// exactly this address.
func (r *Requester) parsePair(pair []byte) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(pair, pair)
	if err != nil {
		return nil, err
	}
	leaf := c.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
		c.Leaf = leaf
	}
	now := r.Clock.Now()
	if now.Before(leaf.NotBefore) || !now.Before(leaf.NotAfter) {
		return nil, fmt.Errorf("it is valid from %s to %s, not now", leaf.NotBefore, leaf.NotAfter)
	}
	if len(leaf.IPAddresses) != 1 || len(leaf.DNSNames) != 0 {
		return nil, fmt.Errorf("it names %v and %q, not exactly %s", leaf.IPAddresses, leaf.DNSNames, r.Address)
	}
	if ip, ok := netip.AddrFromSlice(leaf.IPAddresses[0]); !ok || ip.Unmap() != r.Address.Unmap() {
		return nil, fmt.Errorf("it is for %s, not %s", leaf.IPAddresses[0], r.Address)
	}
	return &c, nil
}

// loadPair is the stored certificate, if it is still good for this
// address; nil, nil when there is none.
func (r *Requester) loadPair() (*tls.Certificate, error) {
	pair, err := os.ReadFile(filepath.Join(r.Dir, pairFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return r.parsePair(pair)
}

// requestKey is the outstanding request's key, made if there is none.
func (r *Requester) requestKey() (*ecdsa.PrivateKey, error) {
	path := filepath.Join(r.Dir, requestKeyFile)
	data, err := os.ReadFile(path)
	if err == nil {
		if block, _ := pem.Decode(data); block != nil && block.Type == "EC PRIVATE KEY" {
			if key, err := x509.ParseECPrivateKey(block.Bytes); err == nil && key.Curve == elliptic.P256() {
				return key, nil
			}
		}
		r.Log.Info("The stored kubelet serving request key does not parse; making a new one", "file", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})); err != nil {
		return nil, err
	}
	return key, nil
}

func (r *Requester) dropRequestKey() {
	if err := os.Remove(filepath.Join(r.Dir, requestKeyFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.Log.Error(err, "Removing the kubelet serving request key failed")
	}
}

// writeFile replaces path with data, 0600, atomically.
func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
