package admission

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/boualleiguie/macrack-operator/internal/policy"
)

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch

// FieldOwner is the operator's server-side apply field manager.
const FieldOwner = "macrack-operator"

// PolicyApplier applies, at start-up, the params ConfigMap and every
// ValidatingAdmissionPolicy with its binding, with server-side apply. An OLM
// bundle cannot carry VAPs, so the operator installs the very policies its
// engine compiled.
type PolicyApplier struct {
	Client    client.Client
	Engine    *policy.Engine
	Namespace string
	Params    policy.Params
	Log       logr.Logger
}

// Start implements manager.Runnable; it applies once and returns.
func (a *PolicyApplier) Start(ctx context.Context) error {
	objs := []runtime.Object{policy.ParamsConfigMap(a.Namespace, a.Params)}
	for _, ap := range a.Engine.AdmissionPolicies(a.Namespace) {
		objs = append(objs, ap.Policy, ap.Binding)
	}
	for _, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return fmt.Errorf("converting %T: %w", o, err)
		}
		u := &unstructured.Unstructured{Object: m}
		delete(u.Object, "status")
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		if err := a.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		a.Log.Info("Applied admission policy object", "kind", u.GetKind(), "name", u.GetName(), "revision", a.Engine.Revision())
	}
	return nil
}

// NeedLeaderElection: every replica may apply the same objects.
func (a *PolicyApplier) NeedLeaderElection() bool { return false }
