package inventory

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// The map leaves managedFields out, and the object keeps them.
func TestToMapLeavesManagedFieldsOutAndTheObjectAlone(t *testing.T) {
	img := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: "sequoia", Labels: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "macrack-operator", Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:replicas":{}}}`)}}},
		Status: fleetv1alpha1.MacOSImageStatus{Replicas: 1}}
	m, err := ToMap(img)
	if err != nil {
		t.Fatal(err)
	}
	md := m["metadata"].(map[string]any)
	if _, has := md["managedFields"]; has {
		t.Fatalf("managedFields in the map: %v", md)
	}
	if md["name"] != "sequoia" || md["labels"].(map[string]any)["a"] != "b" {
		t.Fatalf("metadata lost: %v", md)
	}
	if len(img.ManagedFields) != 1 {
		t.Fatalf("the object lost its managedFields: %v", img.ManagedFields)
	}
}
