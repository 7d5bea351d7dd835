package harness

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/boualleiguie/macrack-operator/internal/admission"
	"github.com/boualleiguie/macrack-operator/internal/policy"
)

// InstallAdmissionPolicies creates the params ConfigMap and every generated
// ValidatingAdmissionPolicy with its binding, as the operator does at
// start-up. It installs no webhook.
func InstallAdmissionPolicies(ctx context.Context, c client.Client, e *policy.Engine, namespace string, params policy.Params) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	if err := c.Create(ctx, policy.ParamsConfigMap(namespace, params)); err != nil {
		return fmt.Errorf("creating params: %w", err)
	}
	aps, err := e.AdmissionPolicies(params)
	if err != nil {
		return err
	}
	for _, ap := range aps {
		// StartOperator installs agent.scope already (InstallAgentScope).
		if err := c.Create(ctx, ap.Policy); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("creating %s: %w", ap.Policy.Name, err)
		}
		if err := c.Create(ctx, ap.Binding); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("creating binding %s: %w", ap.Binding.Name, err)
		}
	}
	return nil
}

// InstallAgentScope creates agent.scope's ValidatingAdmissionPolicy and its
// binding, unless they exist. The operator grants the agents' roles only
// while it observes them (admission.AgentRoleBinder), so every suite whose
// agents act has agent.scope in force, as a cluster has.
func InstallAgentScope(ctx context.Context, c client.Client, e *policy.Engine, params policy.Params) error {
	aps, err := e.AdmissionPolicies(params)
	if err != nil {
		return err
	}
	for _, ap := range aps {
		if ap.Policy.Name != admission.AgentScopePolicyName {
			continue
		}
		if err := c.Create(ctx, ap.Policy); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("creating %s: %w", ap.Policy.Name, err)
		}
		if err := c.Create(ctx, ap.Binding); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("creating binding %s: %w", ap.Binding.Name, err)
		}
		return nil
	}
	return fmt.Errorf("no ValidatingAdmissionPolicy %s among the generated ones", admission.AgentScopePolicyName)
}
