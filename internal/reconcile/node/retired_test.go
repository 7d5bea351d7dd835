package node

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A retired chassis' agent loses its ServiceAccount, and with it its
// tokens; a chassis in service keeps its own, and no other is touched.
func TestARetiredChassisLosesItsAgentServiceAccount(t *testing.T) {
	sa := func(name string) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "macrack-agents", Name: name}}
	}
	exists := func(c client.Client, name string) bool {
		t.Helper()
		err := c.Get(context.Background(), client.ObjectKeyFromObject(sa(name)), &corev1.ServiceAccount{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}

	mn := macNode(good())
	r, c := reconciler(t, class(), mn, sa("agent-c02a"), sa("agent-c02b"), sa("default"))
	run(t, r, c)
	if !exists(c, "agent-c02a") {
		t.Fatal("positive control: a chassis in service lost its agent's ServiceAccount")
	}

	retired := macNode(good())
	retired.Spec.Retired = true
	r, c = reconciler(t, class(), retired, sa("agent-c02a"), sa("agent-c02b"), sa("default"))
	run(t, r, c)
	if exists(c, "agent-c02a") {
		t.Fatal("the retired chassis' agent keeps its ServiceAccount")
	}
	if !exists(c, "agent-c02b") || !exists(c, "default") {
		t.Fatal("retiring one chassis deleted another identity of the agents' namespace")
	}
	run(t, r, c) // already gone: the pass still succeeds
}
