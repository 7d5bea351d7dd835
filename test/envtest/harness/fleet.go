package harness

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/taints"
)

var serials atomic.Int64

// NewSerial returns a fresh serial as Apple prints one.
func NewSerial() string { return fmt.Sprintf("C02T%08d", serials.Add(1)) }

// CreateClass creates a commercial MacNodeClass.
func CreateClass(ctx context.Context, c client.Client, name string, vms int32) (*fleetv1alpha1.MacNodeClass, error) {
	class := &fleetv1alpha1.MacNodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fleetv1alpha1.MacNodeClassSpec{Chip: "M4", Memory: resource.MustParse("16Gi"),
			Disk: resource.MustParse("1T"), NetworkGbps: 10, VMCapacity: vms},
	}
	return class, c.Create(ctx, class)
}

// GoodFacts are the reported facts of a commercial, untampered host that
// holds no VM and no instance disk.
func GoodFacts() *fleetv1alpha1.ReportedFacts {
	return &fleetv1alpha1.ReportedFacts{
		Disk: ptr.To(resource.MustParse("1T")), NetworkGbps: ptr.To(int32(10)), Chip: "M4",
		MacOSVersion: "15.5", SIPEnabled: ptr.To(true), VirtualizationEntitlement: ptr.To(true),
		Quota:     &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK},
		Inventory: &fleetv1alpha1.HostInventory{ObservedAt: metav1.Now()},
	}
}

// CreateChassis creates a MacNode of the class with the given facts (as its
// agent would report them) and, as its agent would, its Node with the
// unleased taint. It returns the MacNode's name.
func CreateChassis(ctx context.Context, c client.Client, class string, facts *fleetv1alpha1.ReportedFacts) (string, error) {
	serial := NewSerial()
	mn := &fleetv1alpha1.MacNode{
		ObjectMeta: metav1.ObjectMeta{Name: strings.ToLower(serial)},
		Spec:       fleetv1alpha1.MacNodeSpec{Serial: serial, NodeClassName: class},
	}
	if err := c.Create(ctx, mn); err != nil {
		return "", fmt.Errorf("creating MacNode: %w", err)
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: mn.Name, Labels: map[string]string{taints.SerialLabel: serial, taints.ClassLabel: class}},
		Spec:       corev1.NodeSpec{Taints: taints.Desired("")},
	}
	if err := c.Create(ctx, node); err != nil {
		return "", fmt.Errorf("creating Node: %w", err)
	}
	if facts != nil {
		// A merge patch of status.reported alone, as the agent writes it, so
		// that it never races the operator's writes of the rest.
		patched := mn.DeepCopy()
		patched.Status.Reported = facts
		if err := c.Status().Patch(ctx, patched, client.MergeFrom(mn)); err != nil {
			return "", fmt.Errorf("reporting facts: %w", err)
		}
	}
	return mn.Name, nil
}

// Tenant is a namespace and a person who may edit leases and instances in it.
type Tenant struct {
	Namespace string
	User      string
	// Client impersonates User.
	Client client.Client
}

// NewTenant creates a namespace, binds macrack-tenant-edit there for user,
// and returns a client that impersonates the user.
func (e *Env) NewTenant(ctx context.Context, user string) (*Tenant, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: user + "-"}}
	if err := e.Client.Create(ctx, ns); err != nil {
		return nil, err
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "macrack-tenant-edit", Namespace: ns.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "macrack-tenant-edit"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}
	if err := e.Client.Create(ctx, rb); err != nil {
		return nil, err
	}
	c, err := e.ClientAs(user)
	if err != nil {
		return nil, err
	}
	if err := WaitAllowed(ctx, c, authorizationv1.ResourceAttributes{Namespace: ns.Name, Verb: "create",
		Group: leasingv1alpha1.GroupVersion.Group, Resource: "macnodeleases"}); err != nil {
		return nil, fmt.Errorf("tenant %s in %s: %w", user, ns.Name, err)
	}
	return &Tenant{Namespace: ns.Name, User: user, Client: c}, nil
}

// WaitAllowed polls until c may do what attrs describe. The API server's
// RBAC authorizer reads bindings from an informer, so a binding just created
// is not in force at once; a test that acts before it is refused 403.
func WaitAllowed(ctx context.Context, c client.Client, attrs authorizationv1.ResourceAttributes) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}
		if err := c.Create(ctx, review); err != nil {
			return false, err
		}
		return review.Status.Allowed, nil
	})
}

// ClientAsServiceAccount impersonates ServiceAccount name of namespace,
// with the groups the API server gives a ServiceAccount token.
func (e *Env) ClientAsServiceAccount(namespace, name string) (client.Client, error) {
	return e.ClientAs(fmt.Sprintf("system:serviceaccount:%s:%s", namespace, name),
		"system:serviceaccounts", "system:serviceaccounts:"+namespace)
}

// ClientAs returns a client that impersonates user, in groups.
func (e *Env) ClientAs(user string, groups ...string) (client.Client, error) {
	return client.New(e.ConfigAs(user, groups...), client.Options{Scheme: e.Scheme})
}

// ConfigAs returns a copy of the administrator's config that impersonates
// user, authenticated, in groups.
func (e *Env) ConfigAs(user string, groups ...string) *rest.Config {
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append([]string{"system:authenticated"}, groups...)}
	return cfg
}
