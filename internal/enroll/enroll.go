// Package enroll records a new chassis: its MacNode and its agent's
// ServiceAccount, and renders the bootstrap kubeconfig, with a time-bound
// token, that the MDM payload installs beside the host agent.
package enroll

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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
	// Address is the chassis' IP address, where the API server reaches its
	// agent for exec and logs (MacNode spec.address); empty for none.
	Address string
	// AgentsNamespace holds the agents' ServiceAccounts.
	AgentsNamespace string
	// TokenTTL bounds the bootstrap token; the agent renews its own.
	TokenTTL time.Duration
}

// NodeName is the MacNode's and the Node's name: the serial in lower case.
func NodeName(serial string) string { return strings.ToLower(serial) }

// Enroll creates (or finds) the MacNode and the agent's ServiceAccount, and
// returns a kubeconfig for the agent against the server of cfg. It binds no
// role: the operator grants the agents' roles to the whole agents'
// namespace once agent.scope is in force (GroupBindings), so the agent's
// requests are refused until then.
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
	if o.Address != "" {
		ip, err := netip.ParseAddr(o.Address)
		if err != nil || ip.Zone() != "" || ip.IsUnspecified() || ip.String() != o.Address {
			return nil, fmt.Errorf("%w: address %q is not an IPv4 or IPv6 address in canonical form", ErrInvalid, o.Address)
		}
	}
	name := NodeName(o.Serial)
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: o.Serial, NodeClassName: o.Class, Address: o.Address}}
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
		if existing.Spec.Address != o.Address {
			// Enrolling again never moves a chassis: a new address is the
			// platform's edit of spec.address, seen in the audit log.
			return nil, fmt.Errorf("%w: MacNode %s exists with address %q, not %q; edit its spec.address to move it", ErrInvalid, name, existing.Spec.Address, o.Address)
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fleetv1alpha1.AgentServiceAccountPrefix + name, Namespace: o.AgentsNamespace,
		Labels: map[string]string{"app.kubernetes.io/part-of": "macrack", fleetv1alpha1.SerialLabel: o.Serial}}}
	if err := c.Create(ctx, sa); client.IgnoreAlreadyExists(err) != nil {
		return nil, fmt.Errorf("creating ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(o.TokenTTL / time.Second))}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return nil, fmt.Errorf("requesting the bootstrap token: %w", err)
	}
	return Kubeconfig(cfg, fleetv1alpha1.AgentServiceAccountPrefix+name, tr.Status.Token)
}

// Roles the agents' bindings grant (config/rbac/agent_role.yaml), and where.
const (
	// AgentRole: its Node, MacNode and instances, cluster-wide, narrowed by
	// agent.scope.
	AgentRole = "macrack-agent"
	// AgentTokenRole, in the agents' namespace: its own tokens.
	AgentTokenRole = "macrack-agent-token"
	// AgentEventsRole, in EventsNamespace: Events about its Node and MacNode.
	AgentEventsRole = "macrack-agent-events"
	// EventsNamespace is where the API server keeps Events about
	// cluster-scoped objects.
	EventsNamespace = metav1.NamespaceDefault
	// AgentHeartbeatRole, in the heartbeat namespace: its heartbeat Lease.
	AgentHeartbeatRole = "macrack-agent-heartbeat"
)

// GroupBindingName names the four bindings that grant the agents' roles,
// each in its place, to the agents' namespace's group. Per-agent bindings
// were named LegacyBindingPrefix+<node>.
const (
	GroupBindingName    = "macrack-agents"
	LegacyBindingPrefix = "macrack-agent-"
)

// GroupBindingLabels mark the group bindings, which the operator keeps.
var GroupBindingLabels = map[string]string{"app.kubernetes.io/part-of": "macrack", "app.kubernetes.io/component": "agent-roles"}

// AgentsGroup is the group of every ServiceAccount of the agents' namespace.
func AgentsGroup(agentsNamespace string) string {
	return "system:serviceaccounts:" + agentsNamespace
}

// GroupBindings grant the agents' roles once, to every ServiceAccount of
// the agents' namespace, rather than one binding per agent: the RBAC
// authorizer visits every ClusterRoleBinding on every request in the
// cluster, so per-agent bindings made each tenant's request cost grow with
// the fleet. RBAC then cannot tell an enrolled agent-<node> from any other
// identity of the namespace (the `default` ServiceAccount that
// kube-controller-manager creates, or one an administrator adds): the
// agent.scope policy does, and refuses every write of theirs. So the
// operator creates these bindings only while it observes agent.scope and
// its binding, and deletes them when either goes (admission.AgentRoleBinder).
func GroupBindings(agentsNamespace string) []client.Object {
	meta := func(namespace string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: GroupBindingName, Namespace: namespace, Labels: maps.Clone(GroupBindingLabels)}
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: AgentsGroup(agentsNamespace)}}
	role := func(r string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r}
	}
	return []client.Object{
		&rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
			ObjectMeta: meta(""), RoleRef: role(AgentRole), Subjects: subjects},
		&rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
			ObjectMeta: meta(agentsNamespace), RoleRef: role(AgentTokenRole), Subjects: subjects},
		&rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
			ObjectMeta: meta(EventsNamespace), RoleRef: role(AgentEventsRole), Subjects: subjects},
		&rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
			ObjectMeta: meta(fleetv1alpha1.HeartbeatNamespace), RoleRef: role(AgentHeartbeatRole), Subjects: subjects},
	}
}

// WaitForRoles waits, up to timeout, until RBAC lets node's agent request
// its own token: until the operator has granted the agents' roles, which
// it does only once agent.scope is in force. An agent started before then
// is refused and exits (launchd starts it again 10 s later); a program that
// starts agents itself waits here first. It asks, as c, with
// SubjectAccessReviews, which RBAC answers from the same informers.
func WaitForRoles(ctx context.Context, c client.Client, agentsNamespace, node string, timeout time.Duration) error {
	sar := func() *authorizationv1.SubjectAccessReview {
		return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + agentsNamespace + ":" + fleetv1alpha1.AgentServiceAccountPrefix + node,
			Groups: []string{"system:serviceaccounts", AgentsGroup(agentsNamespace), "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: agentsNamespace, Verb: "create",
				Resource: "serviceaccounts", Subresource: "token", Name: fleetv1alpha1.AgentServiceAccountPrefix + node},
		}}
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		review := sar()
		if err := c.Create(ctx, review); err != nil {
			return false, fmt.Errorf("asking whether %s's agent holds its roles: %w", node, err)
		}
		return review.Status.Allowed, nil
	})
	if err != nil {
		return fmt.Errorf("the agents' roles are not granted (is the operator running, with agent.scope?): %w", err)
	}
	return nil
}

// AgentRoles are the four roles GroupBindings grant.
var AgentRoles = []string{AgentRole, AgentTokenRole, AgentEventsRole, AgentHeartbeatRole}

// APIAudiences asks the API server for its token audiences: the audiences
// it gives a token requested with none (it fills an empty spec.audiences
// before admission). It requests a short-lived token for a probe
// ServiceAccount in namespace, which it creates if need be. The operator's
// --agent-token-audiences takes the answer.
func APIAudiences(ctx context.Context, c client.Client, namespace string) ([]string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "macrack-audience-probe", Namespace: namespace,
		Labels: map[string]string{"app.kubernetes.io/part-of": "macrack"}}}
	if err := c.Create(ctx, sa); client.IgnoreAlreadyExists(err) != nil {
		return nil, fmt.Errorf("creating ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(600))}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return nil, fmt.Errorf("requesting a token to learn the API server's audiences: %w", err)
	}
	if len(tr.Spec.Audiences) == 0 {
		return nil, fmt.Errorf("the API server answered a token request without audiences")
	}
	return tr.Spec.Audiences, nil
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
