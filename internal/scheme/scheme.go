// Package scheme registers every kind MacRack reads or writes: the core
// Kubernetes kinds and MacRack's four API groups. The operator, the agent,
// the CLI, make run and the tests share it.
package scheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
)

// New returns a scheme with every kind registered.
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		fleetv1alpha1.AddToScheme,
		leasingv1alpha1.AddToScheme,
		computev1alpha1.AddToScheme,
		workloadsv1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("building scheme: %w", err)
		}
	}
	return s, nil
}
