package admission

import (
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
)

const agentsNS = "macrack-agents"

func binder(t *testing.T, objs ...client.Object) (*AgentRoleBinder, client.Client, *clocktesting.FakeClock) {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	clk := clocktesting.NewFakeClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	return &AgentRoleBinder{Client: c, Live: c, Reader: c, AgentsNamespace: agentsNS, Clock: clk, Settle: 2 * time.Second}, c, clk
}

func agentScope(actions ...admissionregistrationv1.ValidationAction) []client.Object {
	return []client.Object{
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: AgentScopePolicyName, UID: "vap"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{Validations: []admissionregistrationv1.Validation{{Expression: "false"}}}},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: AgentScopePolicyName, UID: "vapb"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: AgentScopePolicyName, ValidationActions: actions}},
	}
}

// perAgent are the four bindings enrolment wrote for one agent before.
func perAgent(node string) []client.Object {
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "agent-" + node, Namespace: agentsNS}}
	meta := func(ns string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: enroll.LegacyBindingPrefix + node, Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/part-of": "macrack", fleetv1alpha1.SerialLabel: node}}
	}
	ref := func(r string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r}
	}
	return []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: meta(""), RoleRef: ref(enroll.AgentRole), Subjects: subjects},
		&rbacv1.RoleBinding{ObjectMeta: meta(agentsNS), RoleRef: ref(enroll.AgentTokenRole), Subjects: subjects},
		&rbacv1.RoleBinding{ObjectMeta: meta(enroll.EventsNamespace), RoleRef: ref(enroll.AgentEventsRole), Subjects: subjects},
		&rbacv1.RoleBinding{ObjectMeta: meta(fleetv1alpha1.HeartbeatNamespace), RoleRef: ref(enroll.AgentHeartbeatRole), Subjects: subjects},
	}
}

func defaultSA() *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: agentsNS}}
}

// present counts which of objs exist in c.
func present(t *testing.T, c client.Client, objs []client.Object) int {
	t.Helper()
	n := 0
	for _, o := range objs {
		err := c.Get(context.Background(), client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object))
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err == nil {
			n++
		}
	}
	return n
}

func reconcileOnce(t *testing.T, b *AgentRoleBinder) reconcile.Result {
	t.Helper()
	res, err := b.Reconcile(context.Background(), reconcile.Request{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Without agent.scope the group holds no role, and the per-agent
// bindings, RBAC's fence until then, stay.
func TestWithoutAgentScopeTheAgentsGroupHoldsNoRole(t *testing.T) {
	group := enroll.GroupBindings(agentsNS)
	legacy := perAgent("c02a")
	objs := append(append([]client.Object{defaultSA()}, group...), legacy...)
	b, c, _ := binder(t, objs...)
	reconcileOnce(t, b)
	if n := present(t, c, group); n != 0 {
		t.Fatalf("%d group bindings left without agent.scope", n)
	}
	if n := present(t, c, legacy); n != 4 {
		t.Fatalf("positive control: the per-agent bindings went without agent.scope (%d of 4 left)", n)
	}
}

// An audit-only binding does not fence: the group holds no role.
func TestAnAuditOnlyAgentScopeDoesNotFence(t *testing.T) {
	b, c, clk := binder(t, agentScope(admissionregistrationv1.Audit)...)
	reconcileOnce(t, b)
	clk.Step(time.Minute)
	reconcileOnce(t, b)
	if n := present(t, c, enroll.GroupBindings(agentsNS)); n != 0 {
		t.Fatalf("%d group bindings under an audit-only agent.scope", n)
	}
}

// Once agent.scope and its binding have been in force for the settle, the
// group holds the roles, and only then do the per-agent bindings go.
func TestTheGroupHoldsTheRolesOnlyOnceAgentScopeIsInForce(t *testing.T) {
	group := enroll.GroupBindings(agentsNS)
	legacy := append(perAgent("c02a"), perAgent("c02b")...)
	other := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "macrack-agent-reader",
		Labels: map[string]string{"app.kubernetes.io/part-of": "macrack", fleetv1alpha1.SerialLabel: "x"}},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}}
	objs := append(append(agentScope(admissionregistrationv1.Deny), legacy...), other, defaultSA())
	b, c, clk := binder(t, objs...)

	res := reconcileOnce(t, b)
	if n := present(t, c, group); n != 0 || res.RequeueAfter != 2*time.Second {
		t.Fatalf("granted before the API server could load agent.scope: %d bindings, requeue %s", n, res.RequeueAfter)
	}
	if n := present(t, c, legacy); n != 8 {
		t.Fatalf("per-agent bindings went before the group's came: %d of 8 left", n)
	}

	clk.Step(2 * time.Second)
	reconcileOnce(t, b)
	if n := present(t, c, group); n != 4 {
		t.Fatalf("want the four group bindings, got %d", n)
	}
	crb := &rbacv1.ClusterRoleBinding{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: enroll.GroupBindingName}, crb); err != nil {
		t.Fatal(err)
	}
	if crb.RoleRef.Name != enroll.AgentRole || len(crb.Subjects) != 1 || crb.Subjects[0].Kind != rbacv1.GroupKind ||
		crb.Subjects[0].Name != "system:serviceaccounts:"+agentsNS {
		t.Fatalf("the ClusterRoleBinding grants %s to %+v", crb.RoleRef.Name, crb.Subjects)
	}
	if n := present(t, c, legacy); n != 0 {
		t.Fatalf("%d per-agent bindings left once the group holds the roles", n)
	}
	if present(t, c, []client.Object{other}) != 1 {
		t.Fatal("deleted a binding that is not an agent's")
	}
	sa := &corev1.ServiceAccount{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(defaultSA()), sa); err != nil {
		t.Fatal(err)
	}
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Fatal("the agents' namespace's default ServiceAccount still automounts its token")
	}

	// An edited binding is put back.
	crb.Subjects = append(crb.Subjects, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:authenticated"})
	if err := c.Update(context.Background(), crb); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, b) // deletes it
	reconcileOnce(t, b) // creates it as it should be
	if err := c.Get(context.Background(), client.ObjectKey{Name: enroll.GroupBindingName}, crb); err != nil || len(crb.Subjects) != 1 {
		t.Fatalf("the edited binding was not put back: %v %+v", err, crb.Subjects)
	}

	// agent.scope's binding goes: so do the group's roles.
	if err := c.Delete(context.Background(), agentScope()[1]); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, b)
	if n := present(t, c, group); n != 0 {
		t.Fatalf("%d group bindings left once agent.scope's binding went", n)
	}
}
