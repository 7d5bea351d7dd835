package gitlabrunner

import (
	"fmt"
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
)

// TenantClients gives, for a namespace, a client that acts as that
// namespace's macrack-gitlab-runner ServiceAccount.
type TenantClients interface {
	For(namespace string) (client.Client, error)
}

// Impersonation is TenantClients by impersonation: the API server sees the
// ServiceAccount, authorises it by the namespace's own RoleBindings, and
// runs every admission policy on it as on any tenant. The operator's RBAC
// lets it impersonate that one ServiceAccount name, and nothing else.
type Impersonation struct {
	config *rest.Config
	base   http.RoundTripper
	scheme *runtime.Scheme
	mapper meta.RESTMapper

	mu      sync.Mutex
	clients map[string]client.Client
}

// NewImpersonation shares one connection pool among every namespace's
// client.
func NewImpersonation(cfg *rest.Config, scheme *runtime.Scheme, mapper meta.RESTMapper) (*Impersonation, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the runner identity's HTTP client: %w", err)
	}
	return &Impersonation{config: rest.CopyConfig(cfg), base: hc.Transport, scheme: scheme, mapper: mapper, clients: map[string]client.Client{}}, nil
}

// Username is the identity the controller acts as in namespace.
func Username(namespace string) string {
	return serviceaccount.MakeUsername(namespace, workloadsv1alpha1.RunnerServiceAccount)
}

// For implements TenantClients.
func (i *Impersonation) For(namespace string) (client.Client, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if c, ok := i.clients[namespace]; ok {
		return c, nil
	}
	// The API server adds a ServiceAccount's groups itself when none are
	// asked for.
	rt := transport.NewImpersonatingRoundTripper(transport.ImpersonationConfig{UserName: Username(namespace)}, i.base)
	c, err := client.New(i.config, client.Options{HTTPClient: &http.Client{Transport: rt}, Scheme: i.scheme, Mapper: i.mapper})
	if err != nil {
		return nil, fmt.Errorf("building the client of %s: %w", Username(namespace), err)
	}
	i.clients[namespace] = c
	return c, nil
}
