package scheme

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
)

func TestEveryKindIsRegistered(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []runtime.Object{&corev1.Node{}, &fleetv1alpha1.MacNode{}, &fleetv1alpha1.MacNodeClass{}, &fleetv1alpha1.MacOSImage{},
		&leasingv1alpha1.MacNodeLease{}, &computev1alpha1.MacOSInstance{}, &workloadsv1alpha1.GitLabRunner{}} {
		if gvks, _, err := s.ObjectKinds(obj); err != nil || len(gvks) == 0 {
			t.Errorf("%T is not registered: %v", obj, err)
		}
	}
}
