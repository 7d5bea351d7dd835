package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MacNodeClassSpec describes a hardware SKU that tenants lease by name.
type MacNodeClassSpec struct {
	// chip is the Apple silicon generation, for example "M4" or "M4 Pro".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	Chip string `json:"chip"`

	// memory is the unified memory of one chassis, for example 16Gi.
	// +required
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))",message="memory must be a positive quantity"
	Memory resource.Quantity `json:"memory"`

	// disk is the internal SSD of one chassis. A commercial class has at
	// least 1T (10^12 bytes, about 931Gi); the node.commercial policy refuses
	// smaller classes.
	// +required
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))",message="disk must be a positive quantity"
	Disk resource.Quantity `json:"disk"`

	// networkGbps is the NIC speed in Gb/s. A commercial class has at least 10.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=400
	NetworkGbps int32 `json:"networkGbps"`

	// vmCapacity is how many macOS VMs one chassis of this class runs at once.
	// The macOS licence and the kernel's hv_apple_isa_vm_quota cap it at 2.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2
	VMCapacity int32 `json:"vmCapacity"`

	// imageCacheBudget is how much of one chassis' disk its golden cache may
	// allocate. Least-recently-used goldens are evicted to stay within it,
	// never one in use or booked by the bound lease. An agent flag can
	// override it. Unset, 400Gi.
	// +optional
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))",message="imageCacheBudget must be a positive quantity"
	ImageCacheBudget *resource.Quantity `json:"imageCacheBudget,omitempty"`
}

// DefaultImageCacheBudget is a class's imageCacheBudget when unset.
const DefaultImageCacheBudget = "400Gi"

// MacNodeClassStatus is written by the operator.
type MacNodeClassStatus struct {
	// conditions report whether the class is commercial.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mnc,categories=macrack
// +kubebuilder:printcolumn:name="Chip",type=string,JSONPath=`.spec.chip`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.spec.memory`
// +kubebuilder:printcolumn:name="Disk",type=string,JSONPath=`.spec.disk`
// +kubebuilder:printcolumn:name="Gbps",type=integer,JSONPath=`.spec.networkGbps`
// +kubebuilder:printcolumn:name="VMs",type=integer,JSONPath=`.spec.vmCapacity`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// MacNodeClass is a hardware SKU: chip, memory, disk, NIC and VM capacity.
type MacNodeClass struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec MacNodeClassSpec `json:"spec"`
	// +optional
	Status MacNodeClassStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MacNodeClassList contains a list of MacNodeClass.
type MacNodeClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MacNodeClass `json:"items"`
}
