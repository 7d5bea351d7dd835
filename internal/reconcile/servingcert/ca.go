package servingcert

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
)

const (
	// MaxValidity is the longest a signed serving certificate lasts,
	// whatever the request's expirationSeconds.
	MaxValidity = 30 * 24 * time.Hour
	// backdate is how far before now a certificate starts: clocks of the
	// chassis and the API server's host may lag the operator's.
	backdate = 5 * time.Minute
)

// CA signs the kubelet serving certificates: the CA the API server
// verifies the agents' kubelet API with (--kubelet-certificate-authority).
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// LoadCA reads a CA certificate (the first of certFile's PEM blocks) and
// its private key (PKCS #8, SEC 1 or PKCS #1 PEM).
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("reading the kubelet serving CA: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("reading the kubelet serving CA's key: %w", err)
	}
	return ParseCA(certPEM, keyPEM)
}

// ParseCA is LoadCA on the files' contents.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("the kubelet serving CA holds no PEM CERTIFICATE")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the kubelet serving CA: %w", err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("the kubelet serving CA %q is not a CA that may sign certificates", cert.Subject)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	type publicKey interface{ Equal(crypto.PublicKey) bool }
	if pub, ok := key.Public().(publicKey); !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("the kubelet serving CA's key is not the key of %q", cert.Subject)
	}
	return &CA{Cert: cert, Key: key}, nil
}

func parseKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("the kubelet serving CA's key file holds no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("parsing the kubelet serving CA's key: %w", err)
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey, *rsa.PrivateKey, ed25519.PrivateKey:
		return k.(crypto.Signer), nil
	}
	return nil, fmt.Errorf("the kubelet serving CA's key is a %T", key)
}

// CertPEM is the CA certificate, PEM-encoded.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// Validity is how long a certificate of the request lasts: its
// expirationSeconds, at most MaxValidity (MaxValidity when unset).
func Validity(csr *certificatesv1.CertificateSigningRequest) time.Duration {
	if s := csr.Spec.ExpirationSeconds; s != nil && *s > 0 && time.Duration(*s) <= MaxValidity/time.Second {
		return time.Duration(*s) * time.Second
	}
	return MaxValidity
}

// Sign makes the serving certificate of a request Check approved, at
// now: the request's CN and O and its IP, server auth, valid from now-5m
// for Validity, and never past the CA's own end. It takes nothing else of
// the request: no extension it asks for reaches the certificate.
func (ca *CA) Sign(csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest, now time.Time) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(Validity(csr))
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("the kubelet serving CA %q expired at %s", ca.Cert.Subject, ca.Cert.NotAfter)
	}
	usage := x509.KeyUsageDigitalSignature
	for _, u := range csr.Spec.Usages {
		if u == certificatesv1.UsageKeyEncipherment {
			if _, isRSA := req.PublicKey.(*rsa.PublicKey); isRSA {
				usage |= x509.KeyUsageKeyEncipherment
			}
		}
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: req.Subject.CommonName, Organization: req.Subject.Organization},
		IPAddresses:           req.IPAddresses,
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              usage,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, req.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	var b bytes.Buffer
	if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: der}); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
