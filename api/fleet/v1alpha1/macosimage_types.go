package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MacOSImageSpec names one golden image, one macOS plus one Xcode, by the
// digest of its OCI artifact. Everything else about the golden (versions,
// size, minimum disk, hardware model, auxiliary storage) comes from the
// artifact: the operator resolves it into status.resolved.
type MacOSImageSpec struct {
	// source is the golden's OCI reference, pinned by digest:
	// host[:port]/repository@sha256:<64 hex>. A tag alone is refused: a
	// golden's content must never change under a running fleet.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@sha256:[a-f0-9]{64}$')",message="source must be an OCI reference pinned by digest, host/repository@sha256:<64 hex digits>; a tag alone can move under a running fleet"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="source is immutable: a golden's content never changes under a running fleet; create a new MacOSImage"
	Source string `json:"source"`

	// pullSecretName names a kubernetes.io/dockerconfigjson Secret in the
	// operator's namespace with the registry's credentials. Unset, the
	// registry is read anonymously.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PullSecretName string `json:"pullSecretName,omitempty"`

	// plainHTTP reads the registry over plain HTTP rather than HTTPS: for a
	// registry on loopback, as `make run` has. Every byte is still checked
	// against the pinned digest.
	// +optional
	PlainHTTP bool `json:"plainHTTP,omitempty"`

	// prePull has the golden pulled onto chassis before any tenant asks.
	// +optional
	PrePull *PrePull `json:"prePull,omitempty"`

	// loginUser is the golden's login user: kubectl exec runs commands in
	// the guest as this user. Empty means admin, as in the public Tart
	// goldens.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_-]*$`
	LoginUser string `json:"loginUser,omitempty"`
}

// LoginUserOrDefault is the user kubectl exec runs as in this golden's
// guests.
func (s *MacOSImageSpec) LoginUserOrDefault() string {
	if s.LoginUser == "" {
		return DefaultLoginUser
	}
	return s.LoginUser
}

// PrePull names the chassis that hold a golden before it is asked for.
type PrePull struct {
	// nodeClassNames: every chassis of these classes pulls the golden.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	NodeClassNames []string `json:"nodeClassNames,omitempty"`
}

// ResolvedImage is what the golden's artifact says of itself, as the
// operator read it from the registry.
type ResolvedImage struct {
	// digest is the manifest digest the operator read: the source's.
	// +required
	Digest string `json:"digest"`
	// macOSVersion is the guest macOS, for example "15.5".
	// +required
	MacOSVersion string `json:"macOSVersion"`
	// xcodeVersions are the Xcodes installed, for example ["16.4"].
	// +optional
	// +listType=atomic
	XcodeVersions []string `json:"xcodeVersions,omitempty"`
	// minimumDisk is the smallest instance disk the golden fits on
	// (instance.image reads it).
	// +required
	MinimumDisk resource.Quantity `json:"minimumDisk"`
	// diskSize is the golden disk's size, uncompressed.
	// +required
	DiskSize resource.Quantity `json:"diskSize"`
	// compressedSize is what a pull fetches for the disk.
	// +required
	CompressedSize resource.Quantity `json:"compressedSize"`
	// chunks is how many layers the disk is cut into.
	// +required
	Chunks int32 `json:"chunks"`
	// compression is the chunks' compression, zstd or lz4.
	// +required
	Compression string `json:"compression"`
	// hardwareModel is the base64 VZMacHardwareModel data representation
	// the guest was installed for, read from the golden's hardware-model
	// layer. A macOS guest cannot boot without it.
	// +required
	// +kubebuilder:validation:MaxLength=87384
	HardwareModel string `json:"hardwareModel"`
	// hardwareModelDigest and auxiliaryStorageDigest pin the VM's hardware
	// model and auxiliary-storage template layers.
	// +required
	HardwareModelDigest string `json:"hardwareModelDigest"`
	// +required
	AuxiliaryStorageDigest string `json:"auxiliaryStorageDigest"`
}

// MacOSImageStatus is written by the operator.
type MacOSImageStatus struct {
	// observedGeneration is the generation the operator last resolved.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// resolved is what the golden's artifact holds. Unset until the
	// Resolved condition is True; instances of the image wait until then.
	// +optional
	Resolved *ResolvedImage `json:"resolved,omitempty"`

	// replicas is how many chassis hold a copy of the resolved digest that
	// has verified, chunk by chunk: a chassis still pulling is not counted.
	// Which chassis they are, each MacNode's status.reported.images says,
	// and the chassis' audit records (replicated, evicted) tell over time.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Replicas int32 `json:"replicas,omitempty"`

	// conditions: Resolved.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// audit is this object's journal of unexported transitions; see
	// AuditJournal for who writes what.
	// +optional
	Audit *AuditJournal `json:"audit,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mimg,categories=macrack
// +kubebuilder:printcolumn:name="macOS",type=string,JSONPath=`.status.resolved.macOSVersion`
// +kubebuilder:printcolumn:name="Xcode",type=string,JSONPath=`.status.resolved.xcodeVersions[0]`
// +kubebuilder:printcolumn:name="Disk",type=string,JSONPath=`.status.resolved.diskSize`
// +kubebuilder:printcolumn:name="Resolved",type=string,JSONPath=`.status.conditions[?(@.type=="Resolved")].status`
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.source`,priority=1
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
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

// MinimumDisk is the smallest instance disk the golden fits on, as resolved
// from its artifact; false until the operator has resolved it. Every Go
// reader goes through here; the Rego rule instance.image reads the same
// field.
func (i *MacOSImage) MinimumDisk() (resource.Quantity, bool) {
	if i.Status.Resolved == nil {
		return resource.Quantity{}, false
	}
	return i.Status.Resolved.MinimumDisk, true
}
