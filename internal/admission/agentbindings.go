package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
)

// The operator grants the agents' roles to their namespace's group, and may
// bind those four roles only: the API server refuses a binding of any
// other role it does not itself hold.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=macrack-agent;macrack-agent-token;macrack-agent-events;macrack-agent-heartbeat
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;patch;delete

// AgentScopePolicyName is agent.scope's ValidatingAdmissionPolicy, and its
// binding's name.
const AgentScopePolicyName = "macrack-agent-scope"

// DefaultAgentRolesSettle is how long the binder waits, after it first
// observes agent.scope and its binding, before it grants the group: the
// API server compiles a new policy asynchronously, within about a second.
const DefaultAgentRolesSettle = 2 * time.Second

// AgentRoleBinder grants the agents' roles to every ServiceAccount of the
// agents' namespace (enroll.GroupBindings) only while agent.scope, the
// policy that tells an enrolled agent-<node> from any other identity
// there, is in force; it deletes them when the policy or its binding goes.
// Once they exist it deletes the per-agent bindings that enrolment wrote
// before. It also turns off token automount for the namespace's `default`
// ServiceAccount, which kube-controller-manager creates. It runs on the
// leader only.
type AgentRoleBinder struct {
	Client client.Client
	// Live lists the per-agent bindings to convert, which no cache holds.
	Live            client.Reader
	AgentsNamespace string
	// Clock times the settle; Settle is DefaultAgentRolesSettle if zero.
	Clock  clock.PassiveClock
	Settle time.Duration
	// Reader reads the policy, the group bindings and the `default`
	// ServiceAccount. SetupWithManager sets it to a cache of their own.
	Reader client.Reader

	// seen is the policy and binding (by UID) last found in force, and
	// when they were first found so.
	seen   string
	seenAt time.Time
}

// SetupWithManager watches the policy, its binding, the group bindings and
// the `default` ServiceAccount through a cache narrowed to them.
func (b *AgentRoleBinder) SetupWithManager(mgr ctrl.Manager) error {
	if b.Clock == nil {
		b.Clock = clock.RealClock{}
	}
	named := fields.OneTermEqualSelector("metadata.name", AgentScopePolicyName)
	group := labels.SelectorFromSet(enroll.GroupBindingLabels)
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(),
		ByObject: map[client.Object]cache.ByObject{
			&admissionregistrationv1.ValidatingAdmissionPolicy{}:        {Field: named},
			&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}: {Field: named},
			&rbacv1.ClusterRoleBinding{}:                                {Label: group},
			&rbacv1.RoleBinding{}:                                       {Label: group},
			&corev1.ServiceAccount{}: {
				Namespaces: map[string]cache.Config{b.AgentsNamespace: {}},
				Field:      fields.OneTermEqualSelector("metadata.name", "default"),
			},
		},
	})
	if err != nil {
		return fmt.Errorf("creating the agent roles' cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return err
	}
	b.Reader = c
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{applyKey}
	})
	start := make(chan event.GenericEvent, 1)
	start <- event.GenericEvent{Object: &corev1.ServiceAccount{}}
	bld := ctrl.NewControllerManagedBy(mgr).Named("agent-roles")
	for _, o := range []client.Object{&admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{},
		&rbacv1.ClusterRoleBinding{}, &rbacv1.RoleBinding{}, &corev1.ServiceAccount{}} {
		bld = bld.WatchesRawSource(source.Kind(c, o, all))
	}
	return bld.WatchesRawSource(source.Channel(start, all)).Complete(conflict.Quiet(b))
}

// Reconcile makes the group bindings follow agent.scope.
func (b *AgentRoleBinder) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	if err := b.noAutomount(ctx); err != nil {
		return reconcile.Result{}, err
	}
	inForce, err := b.agentScopeInForce(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	if inForce == "" {
		b.seen = ""
		return reconcile.Result{}, b.revoke(ctx)
	}
	if inForce != b.seen {
		b.seen, b.seenAt = inForce, b.Clock.Now()
	}
	settle := b.Settle
	if settle == 0 {
		settle = DefaultAgentRolesSettle
	}
	if wait := settle - b.Clock.Since(b.seenAt); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	if err := b.grant(ctx); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, b.convert(ctx)
}

// agentScopeInForce returns the UIDs of agent.scope and of its binding when
// both exist, are not being deleted, and the binding denies with that
// policy; "" otherwise.
func (b *AgentRoleBinder) agentScopeInForce(ctx context.Context) (string, error) {
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := b.Reader.Get(ctx, client.ObjectKey{Name: AgentScopePolicyName}, vap); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := b.Reader.Get(ctx, client.ObjectKey{Name: AgentScopePolicyName}, binding); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if !vap.DeletionTimestamp.IsZero() || !binding.DeletionTimestamp.IsZero() ||
		binding.Spec.PolicyName != vap.Name || !slices.Contains(binding.Spec.ValidationActions, admissionregistrationv1.Deny) ||
		len(vap.Spec.Validations) == 0 {
		return "", nil
	}
	return string(vap.UID) + "/" + string(binding.UID), nil
}

// grant creates each group binding that is missing, and puts back the
// subjects and role of one that was edited.
func (b *AgentRoleBinder) grant(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	for _, want := range enroll.GroupBindings(b.AgentsNamespace) {
		live := want.DeepCopyObject().(client.Object)
		err := b.Reader.Get(ctx, client.ObjectKeyFromObject(want), live)
		if apierrors.IsNotFound(err) {
			if err := b.Client.Create(ctx, want); client.IgnoreAlreadyExists(err) != nil {
				return fmt.Errorf("granting the agents' roles: creating %s %s: %w", kindOf(want), client.ObjectKeyFromObject(want), err)
			}
			log.Info("Granted the agents' roles to their namespace", "kind", kindOf(want), "name", want.GetName(), "namespace", want.GetNamespace())
			continue
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", client.ObjectKeyFromObject(want), err)
		}
		if sameGrant(want, live) {
			continue
		}
		// A binding's roleRef cannot change: replace the binding.
		uid := live.GetUID()
		if err := b.Client.Delete(ctx, live, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("replacing edited %s: %w", client.ObjectKeyFromObject(want), err)
		}
		log.Info("Replaced an edited agents' role binding", "kind", kindOf(want), "name", want.GetName(), "namespace", want.GetNamespace())
	}
	return nil
}

// revoke deletes the group bindings: without agent.scope, RBAC alone
// would let every identity of the agents' namespace act as an agent.
func (b *AgentRoleBinder) revoke(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	for _, o := range enroll.GroupBindings(b.AgentsNamespace) {
		live := o.DeepCopyObject().(client.Object)
		if err := b.Reader.Get(ctx, client.ObjectKeyFromObject(o), live); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("reading %s: %w", client.ObjectKeyFromObject(o), err)
		}
		if err := b.Client.Delete(ctx, live); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("revoking the agents' roles: deleting %s: %w", client.ObjectKeyFromObject(o), err)
		}
		log.Info("Revoked the agents' roles: agent.scope or its binding is missing", "kind", kindOf(o), "name", o.GetName(), "namespace", o.GetNamespace())
	}
	return nil
}

// convert deletes the per-agent bindings enrolment wrote before the group
// bindings, once those are in place: one ClusterRoleBinding and three
// RoleBindings per agent, labelled with its serial.
func (b *AgentRoleBinder) convert(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	perAgent := client.MatchingLabels{"app.kubernetes.io/part-of": "macrack"}
	hasSerial := client.HasLabels{fleetv1alpha1.SerialLabel}
	crbs := &rbacv1.ClusterRoleBindingList{}
	if err := b.Live.List(ctx, crbs, perAgent, hasSerial); err != nil {
		return fmt.Errorf("listing per-agent ClusterRoleBindings: %w", err)
	}
	var legacy []client.Object
	for i := range crbs.Items {
		if isLegacy(crbs.Items[i].Name, crbs.Items[i].RoleRef) {
			legacy = append(legacy, &crbs.Items[i])
		}
	}
	for _, ns := range []string{b.AgentsNamespace, enroll.EventsNamespace, fleetv1alpha1.HeartbeatNamespace} {
		rbs := &rbacv1.RoleBindingList{}
		if err := b.Live.List(ctx, rbs, client.InNamespace(ns), perAgent, hasSerial); err != nil {
			return fmt.Errorf("listing per-agent RoleBindings in %s: %w", ns, err)
		}
		for i := range rbs.Items {
			if isLegacy(rbs.Items[i].Name, rbs.Items[i].RoleRef) {
				legacy = append(legacy, &rbs.Items[i])
			}
		}
	}
	for _, o := range legacy {
		if err := b.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting per-agent binding %s: %w", client.ObjectKeyFromObject(o), err)
		}
	}
	if len(legacy) > 0 {
		log.Info("Deleted per-agent role bindings; the agents' namespace holds the roles", "count", len(legacy))
	}
	return nil
}

// noAutomount turns off token automount for the agents' namespace's
// `default` ServiceAccount: it now holds the agents' roles, fenced by
// agent.scope, and no Pod there needs its token.
func (b *AgentRoleBinder) noAutomount(ctx context.Context) error {
	sa := &corev1.ServiceAccount{}
	if err := b.Reader.Get(ctx, client.ObjectKey{Namespace: b.AgentsNamespace, Name: "default"}, sa); err != nil {
		return client.IgnoreNotFound(err)
	}
	if sa.AutomountServiceAccountToken != nil && !*sa.AutomountServiceAccountToken {
		return nil
	}
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"automountServiceAccountToken":false}`))
	if err := b.Client.Patch(ctx, sa, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("turning off token automount for %s/default: %w", b.AgentsNamespace, err)
	}
	ctrl.LoggerFrom(ctx).Info("Turned off token automount for the agents' namespace's default ServiceAccount", "namespace", b.AgentsNamespace)
	return nil
}

// isLegacy tells a per-agent binding: named after its node, of one of the
// agents' roles.
func isLegacy(name string, ref rbacv1.RoleRef) bool {
	return strings.HasPrefix(name, enroll.LegacyBindingPrefix) && ref.Kind == "ClusterRole" && slices.Contains(enroll.AgentRoles, ref.Name)
}

// sameGrant tells whether live grants what want does, to whom it does.
func sameGrant(want, live runtime.Object) bool {
	switch w := want.(type) {
	case *rbacv1.ClusterRoleBinding:
		l := live.(*rbacv1.ClusterRoleBinding)
		return w.RoleRef == l.RoleRef && slices.Equal(w.Subjects, l.Subjects)
	case *rbacv1.RoleBinding:
		l := live.(*rbacv1.RoleBinding)
		return w.RoleRef == l.RoleRef && slices.Equal(w.Subjects, l.Subjects)
	}
	return false
}

// kindOf names a group binding's kind.
func kindOf(o client.Object) string {
	if _, ok := o.(*rbacv1.ClusterRoleBinding); ok {
		return "ClusterRoleBinding"
	}
	return "RoleBinding"
}
