// Package v1alpha1 contains the API types of the workloads.macrack.io group:
// the kinds that act as tenants of MacRack, using only leases and instances.
// +kubebuilder:object:generate=true
// +groupName=workloads.macrack.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group version used to register these objects.
	GroupVersion = schema.GroupVersion{Group: "workloads.macrack.io", Version: "v1alpha1"}

	// SchemeBuilder adds this group-version's kinds to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types in this group-version to the given scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers every kind of this group-version, as k8s.io/api
// does (controller-runtime's scheme.Builder is deprecated).
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&GitLabRunner{},
		&GitLabRunnerList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
