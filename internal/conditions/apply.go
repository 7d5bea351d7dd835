package conditions

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Apply writes one condition of obj's status by server-side apply, under
// owner's field manager. status.conditions is a list map keyed by type:
// the API server merges this writer's item into the list as stored, so a
// writer of another type's item, or of another status field, neither
// refuses this write nor loses its own, and no resourceVersion lock is
// needed. c is the condition as Set left it, on obj's conditions.
func Apply(ctx context.Context, c client.Client, obj client.Object, cond metav1.Condition, owner string) error {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return fmt.Errorf("applying condition %s: %w", cond.Type, err)
	}
	item, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&cond)
	if err != nil {
		return fmt.Errorf("applying condition %s: %w", cond.Type, err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(obj.GetNamespace())
	u.SetName(obj.GetName())
	if err := unstructured.SetNestedSlice(u.Object, []any{item}, "status", "conditions"); err != nil {
		return fmt.Errorf("applying condition %s: %w", cond.Type, err)
	}
	// Forced: the item is this writer's alone, whoever last wrote it.
	return c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(owner), client.ForceOwnership)
}
