package main

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The tenant of `make run`: one person of the team my-team, who holds
// macrack-tenant-edit in that namespace and nothing else (the catalogue
// aside, which every authenticated user reads). docs/tenant.md runs as this
// user, through bin/tenant.kubeconfig, whose context names the namespace.
const (
	tenantNamespace = "my-team"
	tenantUser      = "dev@my-team"
	tenantRole      = "macrack-tenant-edit"
)

// setUpTenant creates the tenant's namespace and binds the tenant its role
// there. The roles themselves are config/rbac's, applied with the fleet.
func setUpTenant(ctx context.Context, c client.Client) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNamespace}}
	if err := c.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("creating namespace %s: %w", tenantNamespace, err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: tenantRole, Namespace: tenantNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: tenantRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: tenantUser}},
	}
	if err := c.Create(ctx, rb); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("binding %s to %s in %s: %w", tenantUser, tenantRole, tenantNamespace, err)
	}
	return nil
}

// writeTenantKubeconfig adds the tenant's user (a client certificate, in no
// group) and writes its kubeconfig, its context's namespace the tenant's.
func writeTenantKubeconfig(env *envtest.Environment, path string) (string, error) {
	u, err := env.ControlPlane.AddUser(envtest.User{Name: tenantUser}, nil)
	if err != nil {
		return "", fmt.Errorf("adding user %s: %w", tenantUser, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("rendering the kubeconfig of %s: %w", tenantUser, err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return "", fmt.Errorf("reading the kubeconfig of %s: %w", tenantUser, err)
	}
	for _, ctx := range cfg.Contexts {
		ctx.Namespace = tenantNamespace
	}
	data, err = clientcmd.Write(*cfg)
	if err != nil {
		return "", fmt.Errorf("writing the kubeconfig of %s: %w", tenantUser, err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}
