package admission

import (
	"context"

	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// DefaultMinimumDuration is what a lease gets when it names no duration.
const DefaultMinimumDuration = "24h"

// +kubebuilder:webhook:path=/mutate-leasing-macrack-io-v1alpha1-macnodelease,mutating=true,failurePolicy=fail,sideEffects=None,groups=leasing.macrack.io,resources=macnodeleases,verbs=create,versions=v1alpha1,name=mmacnodelease.macrack.io,admissionReviewVersions=v1

// LeaseDefaulter writes minimumDuration: 24h on a lease that has none. It is
// not a substitute for validation: the schema requires the field, and the
// policies refuse anything below 24h.
type LeaseDefaulter struct{}

// Default implements admission.Defaulter.
func (LeaseDefaulter) Default(_ context.Context, lease *leasingv1alpha1.MacNodeLease) error {
	if lease.Spec.MinimumDuration == "" {
		lease.Spec.MinimumDuration = DefaultMinimumDuration
	}
	return nil
}
