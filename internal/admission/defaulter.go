package admission

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// DefaultMinimumDuration is what a lease gets when it names no duration.
const DefaultMinimumDuration = "24h"

// +kubebuilder:webhook:path=/mutate-leasing-macrack-io-v1alpha1-macnodelease,mutating=true,failurePolicy=fail,sideEffects=None,groups=leasing.macrack.io,resources=macnodeleases,verbs=create,versions=v1alpha1,name=mmacnodelease.macrack.io,admissionReviewVersions=v1

// LeaseDefaulter writes minimumDuration: 24h on a lease that has none. It is
// not a substitute for validation: the schema requires the field, and the
// policies refuse anything below 24h.
//
// It also gives the new lease the operator's finalizers, macrack.io/lease
// and macrack.io/audit, in the create itself: written after it, by the lease
// controller and the audit exporter, they were two more writes, racing for
// the absent list (a JSON patch cannot append to it, so one of the two lost
// once per lease). The controllers still add a missing one: a lease created
// while the webhook was not configured, or before the upgrade that added
// this, or one a tenant took macrack.io/lease off before it was bound.
// From the create on, the policies hold them as they held the controllers'
// (audit.finalizer at any time, lease.release until earliestReleaseAt).
type LeaseDefaulter struct {
	// Finalizers are those of the controllers that run in this operator
	// (see Finalizers), which take them off again: a finalizer nobody
	// removes would hold a deleted lease for ever.
	Finalizers []string
}

// Default implements admission.Defaulter.
func (d LeaseDefaulter) Default(_ context.Context, lease *leasingv1alpha1.MacNodeLease) error {
	if lease.Spec.MinimumDuration == "" {
		lease.Spec.MinimumDuration = DefaultMinimumDuration
	}
	addFinalizers(lease, d.Finalizers...)
	return nil
}

// +kubebuilder:webhook:path=/mutate-compute-macrack-io-v1alpha1-macosinstance,mutating=true,failurePolicy=fail,sideEffects=None,groups=compute.macrack.io,resources=macosinstances,verbs=create,versions=v1alpha1,name=mmacosinstance.macrack.io,admissionReviewVersions=v1

// InstanceDefaulter gives a new instance the audit exporter's finalizer,
// macrack.io/audit, in the create, for the reasons LeaseDefaulter gives the
// lease its own: the exporter's add, and its race with the agent's
// macrack.io/disk-wipe for the absent list, are gone; the agent's add now
// extends a list that exists. The exporter still adds it if it is missing.
// macrack.io/disk-wipe stays the agent's to add once it runs the instance:
// an instance never placed has no disk, and no agent that could remove it.
type InstanceDefaulter struct {
	// Finalizers are those of the controllers that run, as the lease's.
	Finalizers []string
}

// Default implements admission.Defaulter.
func (d InstanceDefaulter) Default(_ context.Context, inst *computev1alpha1.MacOSInstance) error {
	addFinalizers(inst, d.Finalizers...)
	return nil
}

// Defaulters are the mutating webhooks' handlers.
type Defaulters struct {
	Lease    LeaseDefaulter
	Instance InstanceDefaulter
}

// Finalizers are the defaulters of an operator that runs the lease
// controller (controllers) and the audit exporter (exported), each of
// which removes its own finalizer; neither runs in a webhooks-only one.
func Finalizers(controllers, exported bool) Defaulters {
	var d Defaulters
	if controllers {
		d.Lease.Finalizers = append(d.Lease.Finalizers, fleetv1alpha1.LeaseFinalizer)
	}
	if controllers && exported {
		d.Lease.Finalizers = append(d.Lease.Finalizers, fleetv1alpha1.AuditFinalizer)
		d.Instance.Finalizers = append(d.Instance.Finalizers, fleetv1alpha1.AuditFinalizer)
	}
	return d
}

// addFinalizers appends those of names obj lacks, in order, keeping what it
// lists (a tenant's own finalizers are theirs). Never on an object being
// deleted, whose finalizers the API server no longer lets grow.
func addFinalizers(obj client.Object, names ...string) {
	if !obj.GetDeletionTimestamp().IsZero() {
		return
	}
	for _, name := range names {
		controllerutil.AddFinalizer(obj, name)
	}
}
