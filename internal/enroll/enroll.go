// Package enroll records a new chassis: its MacNode and its agent's
// ServiceAccount, and renders the bootstrap kubeconfig, with a time-bound
// token, that the MDM payload installs beside the host agent.
package enroll

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// ErrInvalid means the enrolment request itself is wrong.
var ErrInvalid = errors.New("invalid enrolment")

var serialPattern = regexp.MustCompile(`^[A-Z0-9]{8,17}$`)

// Options describe one chassis.
type Options struct {
	// Serial as Apple prints it, e.g. C02XL0GHJGH5.
	Serial string
	// Class names the MacNodeClass.
	Class string
	// AgentsNamespace holds the agents' ServiceAccounts.
	AgentsNamespace string
	// TokenTTL bounds the bootstrap token; the agent renews its own.
	TokenTTL time.Duration
}

// NodeName is the MacNode's and the Node's name: the serial in lower case.
func NodeName(serial string) string { return strings.ToLower(serial) }

// Enroll creates (or finds) the MacNode and the agent's ServiceAccount, and
// returns a kubeconfig for the agent against the server of cfg.
func Enroll(ctx context.Context, c client.Client, cfg *rest.Config, o Options) ([]byte, error) {
	if !serialPattern.MatchString(o.Serial) {
		return nil, fmt.Errorf("%w: serial %q is not as Apple prints it (8 to 17 capital letters and digits)", ErrInvalid, o.Serial)
	}
	if o.Class == "" || o.AgentsNamespace == "" || o.TokenTTL < 10*time.Minute {
		return nil, fmt.Errorf("%w: a class, the agents' namespace and a token lifetime of at least 10m are required", ErrInvalid)
	}
	class := &fleetv1alpha1.MacNodeClass{}
	if err := c.Get(ctx, client.ObjectKey{Name: o.Class}, class); err != nil {
		return nil, fmt.Errorf("getting MacNodeClass %s: %w", o.Class, err)
	}
	name := NodeName(o.Serial)
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: o.Serial, NodeClassName: o.Class}}
	if err := c.Create(ctx, mn); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating MacNode %s: %w", name, err)
		}
		existing := &fleetv1alpha1.MacNode{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, existing); err != nil {
			return nil, err
		}
		if existing.Spec.NodeClassName != o.Class {
			return nil, fmt.Errorf("%w: MacNode %s exists with class %s, not %s", ErrInvalid, name, existing.Spec.NodeClassName, o.Class)
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + name, Namespace: o.AgentsNamespace,
		Labels: map[string]string{"app.kubernetes.io/part-of": "macrack", "macrack.io/serial": o.Serial}}}
	if err := c.Create(ctx, sa); client.IgnoreAlreadyExists(err) != nil {
		return nil, fmt.Errorf("creating ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(o.TokenTTL / time.Second))}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return nil, fmt.Errorf("requesting the bootstrap token: %w", err)
	}
	return Kubeconfig(cfg, "agent-"+name, tr.Status.Token)
}

// Kubeconfig renders a kubeconfig for user with token against cfg's server.
func Kubeconfig(cfg *rest.Config, user, token string) ([]byte, error) {
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("reading the cluster's CA: %w", err)
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["macrack"] = &clientcmdapi.Cluster{
		Server: cfg.Host, CertificateAuthorityData: ca, InsecureSkipTLSVerify: cfg.Insecure,
	}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["macrack"] = &clientcmdapi.Context{Cluster: "macrack", AuthInfo: user}
	kc.CurrentContext = "macrack"
	return clientcmd.Write(*kc)
}
