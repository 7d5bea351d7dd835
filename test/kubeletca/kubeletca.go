// Package kubeletca makes the credentials kube-apiserver presents to the
// host agents' kubelet API, for the envtest suites and `make run`: a client
// CA, which the agents trust, and the API server's kubelet client
// certificate it signs (--kubelet-client-certificate, --kubelet-client-key).
// A kubeadm cluster signs that certificate with its cluster CA; here the CA
// is the API server's kubelet client's alone, so that no envtest user's
// certificate passes an agent's authentication.
//
// It makes the kubelet serving CA too, a second CA: the operator signs the
// agents' serving certificates with it (--kubelet-serving-ca-cert-file and
// --kubelet-serving-ca-key-file), and the API server verifies the agents
// against it (--kubelet-certificate-authority).
package kubeletca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// APIServerUser is the API server's identity towards kubelets, as kubeadm
// names it. It needs create on nodes/proxy, which KubeletAPIAdminBinding
// grants.
const APIServerUser = "kube-apiserver-kubelet-client"

// CA is a client CA on disk and the API server's kubelet client certificate.
type CA struct {
	// CAFile is the CA certificate the agents trust (--kubelet-client-ca).
	CAFile string
	// CertFile and KeyFile are the API server's kubelet client.
	CertFile, KeyFile string
	// ServingCAFile and ServingCAKeyFile are the kubelet serving CA and
	// its key (PKCS #8): the operator's, and the API server's
	// --kubelet-certificate-authority.
	ServingCAFile, ServingCAKeyFile string

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// New makes the client CA, the API server's kubelet client certificate
// and the kubelet serving CA in dir.
func New(dir string) (*CA, error) {
	cert, key, der, err := newCA("macrack-kubelet-client-ca")
	if err != nil {
		return nil, err
	}
	ca := &CA{CAFile: filepath.Join(dir, "kubelet-client-ca.crt"), cert: cert, key: key}
	if err := writePEM(ca.CAFile, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	ca.CertFile, ca.KeyFile = filepath.Join(dir, "apiserver-kubelet-client.crt"), filepath.Join(dir, "apiserver-kubelet-client.key")
	if err := ca.WriteClient(APIServerUser, nil, ca.CertFile, ca.KeyFile); err != nil {
		return nil, err
	}
	_, servingKey, servingDER, err := newCA("macrack-kubelet-serving-ca")
	if err != nil {
		return nil, err
	}
	servingKeyDER, err := x509.MarshalPKCS8PrivateKey(servingKey)
	if err != nil {
		return nil, err
	}
	ca.ServingCAFile, ca.ServingCAKeyFile = filepath.Join(dir, "kubelet-serving-ca.crt"), filepath.Join(dir, "kubelet-serving-ca.key")
	if err := writePEM(ca.ServingCAFile, "CERTIFICATE", servingDER); err != nil {
		return nil, err
	}
	if err := writePEM(ca.ServingCAKeyFile, "PRIVATE KEY", servingKeyDER); err != nil {
		return nil, err
	}
	return ca, nil
}

// newCA makes a self-signed CA valid for a week.
func newCA(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, key, der, nil
}

// ServingRoots is a pool of the kubelet serving CA, to verify an agent's
// kubelet API as the API server does.
func (ca *CA) ServingRoots() (*x509.CertPool, error) {
	data, err := os.ReadFile(ca.ServingCAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no certificate", ca.ServingCAFile)
	}
	return pool, nil
}

// WriteClient signs a client certificate for user in groups, and writes it
// and its key: for the tests that call an agent directly.
func (ca *CA) WriteClient(user string, groups []string, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: user, Organization: groups},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(keyFile, "EC PRIVATE KEY", keyDER)
}

// Configure gives env's API server the kubelet client certificate, has
// it reach Nodes at their InternalIP, the only address MacRack publishes,
// and verify their serving certificates against the kubelet serving CA:
// the operator must run with it (ServingCAFile, ServingCAKeyFile) for
// exec and logs to reach an agent.
func (ca *CA) Configure(env *envtest.Environment) {
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("kubelet-client-certificate", ca.CertFile)
	args.Set("kubelet-client-key", ca.KeyFile)
	args.Set("kubelet-preferred-address-types", "InternalIP")
	args.Set("kubelet-certificate-authority", ca.ServingCAFile)
}

// KubeletAPIAdminBinding grants the API server's kubelet client the
// bootstrap role system:kubelet-api-admin (create on nodes/proxy), as
// kubeadm does: the agents ask a SubjectAccessReview for each call.
func KubeletAPIAdminBinding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "macrack:" + APIServerUser},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: APIServerUser}}}
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
