package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MacOSImageSpec is one golden image: one macOS version plus one Xcode.
type MacOSImageSpec struct {
	// macOSVersion is the guest macOS version, for example "15.5".
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+){0,2}$`
	MacOSVersion string `json:"macOSVersion"`

	// xcodeVersion is the Xcode installed in the image, for example "16.4".
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+){0,2}$`
	XcodeVersion string `json:"xcodeVersion"`

	// source is where hosts pull the image from, for example an OCI reference
	// or an https URL on the central store.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Source string `json:"source"`

	// digest is the content digest of the disk image.
	// +required
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	Digest string `json:"digest"`

	// size is the disk image size.
	// +required
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))",message="size must be a positive quantity"
	Size resource.Quantity `json:"size"`

	// hardwareModel is the base64 VZMacHardwareModel data representation that
	// the guest was installed for. A macOS guest cannot boot without it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	HardwareModel string `json:"hardwareModel"`

	// auxiliaryStorageTemplate is where hosts pull the auxiliary (NVRAM)
	// storage template from; each instance gets its own clone.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	AuxiliaryStorageTemplate string `json:"auxiliaryStorageTemplate"`
}

// MacOSImageStatus is written by the operator.
type MacOSImageStatus struct {
	// replicatedOn lists the serials of the hosts that hold this image.
	// +optional
	// +listType=set
	ReplicatedOn []string `json:"replicatedOn,omitempty"`

	// conditions report the image's availability.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mimg,categories=macrack
// +kubebuilder:printcolumn:name="macOS",type=string,JSONPath=`.spec.macOSVersion`
// +kubebuilder:printcolumn:name="Xcode",type=string,JSONPath=`.spec.xcodeVersion`
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=`.spec.size`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// MacOSImage is a golden image, one per macOS plus Xcode.
type MacOSImage struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec MacOSImageSpec `json:"spec"`
	// +optional
	Status MacOSImageStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MacOSImageList contains a list of MacOSImage.
type MacOSImageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MacOSImage `json:"items"`
}

// MinimumDisk is the smallest instance disk the image fits on: its spec.size
// today. Every reader (the agent's clone check; the Rego rule instance.image
// has its own image_size) goes through here, so that the size can move to
// what the operator resolves from the image's artifact.
func (i *MacOSImage) MinimumDisk() resource.Quantity { return i.Spec.Size }
