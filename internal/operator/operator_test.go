package operator

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// The cache keeps an object's every field but managedFields.
func TestTheCacheDropsManagedFieldsAndNothingElse(t *testing.T) {
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: "c02", ResourceVersion: "7",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "macrack-agent", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Spec:   fleetv1alpha1.MacNodeSpec{Serial: "C02"},
		Status: fleetv1alpha1.MacNodeStatus{Phase: fleetv1alpha1.MacNodeReady}}
	out, err := CacheOptions().DefaultTransform(mn.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*fleetv1alpha1.MacNode)
	if len(got.ManagedFields) != 0 {
		t.Errorf("managedFields %v kept", got.ManagedFields)
	}
	if got.Name != mn.Name || got.ResourceVersion != mn.ResourceVersion || got.Spec.Serial != mn.Spec.Serial || got.Status.Phase != mn.Status.Phase {
		t.Errorf("the cached object %+v lost more than its managedFields", got)
	}
}
