package patch

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// ApplyStatus writes the fields of obj's status that status holds (a
// value that encodes to a JSON object: a map, or a struct of the fields),
// and no others, by server-side apply under owner's field manager. A list
// map such as status.conditions (keyed by type) is merged item by item:
// the other writers of the object's status, whether of another field or
// of another condition type, neither refuse this write nor lose theirs to
// it, so it takes no resourceVersion lock. The object is not created if
// it is gone: a status subresource never creates (NotFound).
func ApplyStatus(ctx context.Context, c client.Client, obj client.Object, owner string, status any) error {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return fmt.Errorf("applying status: %w", err)
	}
	raw, err := json.Marshal(status)
	if err != nil {
		return fmt.Errorf("encoding the applied status: %w", err)
	}
	fields := map[string]any{}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return fmt.Errorf("decoding the applied status: %w", err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": fields}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(obj.GetNamespace())
	u.SetName(obj.GetName())
	// Forced: the fields are this writer's alone, whoever wrote them last.
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(owner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying status: %w", err)
	}
	return nil
}
