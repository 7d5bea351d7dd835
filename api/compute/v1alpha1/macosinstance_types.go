package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// The spec is immutable once created: the agent placed, cloned and sized
// the VM from it, and the chassis' inventory counts it as written. The rule
// names each field rather than comparing the whole spec, so that
// spec.access (the tenant's SSH keys) may change; the schema suite's test
// "refuses a change to every spec field" fails when a field is added
// without being named here or being access.
// +kubebuilder:validation:XValidation:rule="self.leaseName == oldSelf.leaseName && self.imageName == oldSelf.imageName && self.cpu == oldSelf.cpu && self.memory == oldSelf.memory && self.disk == oldSelf.disk",message="spec is immutable once created (leaseName, imageName, cpu, memory and disk)"
// +kubebuilder:validation:XValidation:rule="has(self.guestConfig) == has(oldSelf.guestConfig) && (!has(self.guestConfig) || self.guestConfig == oldSelf.guestConfig)",message="guestConfig is set at creation and never changed"

// MacOSInstanceSpec is one macOS VM inside the tenant's lease. It is
// immutable once created, but for access.
type MacOSInstanceSpec struct {
	// leaseName names the MacNodeLease, in this namespace, that the VM runs in.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="leaseName is immutable"
	LeaseName string `json:"leaseName"`

	// imageName names the MacOSImage (macOS plus Xcode) to boot.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ImageName string `json:"imageName"`

	// cpu is the number of virtual CPUs.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	CPU int32 `json:"cpu"`

	// memory is the VM's memory, for example 8Gi.
	// +required
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))",message="memory must be a positive quantity"
	Memory resource.Quantity `json:"memory"`

	// disk is the VM's disk, for example 200Gi. The disk is cloned from the
	// image and wiped when the instance is deleted.
	// +required
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))",message="disk must be a positive quantity"
	Disk resource.Quantity `json:"disk"`

	// guestConfig is configuration for the guest agent, sealed to the
	// chassis' guest key (MacNode status.reported.guestKey), for example a
	// CI runner's token. Only that chassis' host agent can open it, and it
	// hands it to the guest over vsock. Set at creation, never changed.
	// +optional
	GuestConfig *SealedGuestConfig `json:"guestConfig,omitempty"`

	// access is how the tenant's people reach the VM. It is the one part
	// of the spec that may change after creation: the host agent installs
	// a change in the running guest.
	// +optional
	Access *InstanceAccess `json:"access,omitempty"`
}

// InstanceAccess is how the tenant's people reach an instance's VM.
type InstanceAccess struct {
	// sshAuthorizedKeys are OpenSSH public keys, one line each as in
	// authorized_keys ("ssh-ed25519 AAAA... comment"), without options.
	// The host agent installs them for the image's login user, in place of
	// the keys it installed before, so that ssh through kubectl
	// port-forward to the VM's port 22 logs in as that user. Public keys
	// are not secret.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=8192
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^(ssh-ed25519|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|sk-ssh-ed25519@openssh.com|sk-ecdsa-sha2-nistp256@openssh.com|ssh-rsa) [A-Za-z0-9+/]+={0,3}( [^\\n]*)?$')",message="each key is one line of an OpenSSH public key: its type (ssh-ed25519, ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, ecdsa-sha2-nistp521, sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com or ssh-rsa), a space, its base64, and an optional comment"
	SSHAuthorizedKeys []string `json:"sshAuthorizedKeys,omitempty"`
}

// SSHAuthorizedKeys are the keys spec.access names, or none.
func (s *MacOSInstanceSpec) SSHAuthorizedKeys() []string {
	if s.Access == nil {
		return nil
	}
	return s.Access.SSHAuthorizedKeys
}

// SealedGuestConfig is an HPKE-sealed blob for one instance's guest. The
// seal is bound to the instance's namespace, name and node, so a blob copied
// onto another instance does not open.
type SealedGuestConfig struct {
	// keyID names the chassis key it is sealed to.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{16}$`
	KeyID string `json:"keyID"`
	// sealed is the HPKE encapsulated key followed by the ciphertext,
	// standard base64.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32768
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]+={0,2}$`
	Sealed string `json:"sealed"`
}

// VMPhase is the VM's state as the host agent sees it.
// +kubebuilder:validation:Enum=Pending;Pulling;Creating;Starting;Running;Stopping;Stopped;Failed
type VMPhase string

// The VM phases. Every phase but Stopped counts as live toward instance.cap.
const (
	VMPending VMPhase = "Pending"
	// VMPulling: the chassis is pulling the instance's golden.
	VMPulling  VMPhase = "Pulling"
	VMCreating VMPhase = "Creating"
	VMStarting VMPhase = "Starting"
	VMRunning  VMPhase = "Running"
	VMStopping VMPhase = "Stopping"
	VMStopped  VMPhase = "Stopped"
	VMFailed   VMPhase = "Failed"
)

// RuntimeStatus is the host agent's part of the instance status.
type RuntimeStatus struct {
	// phase is the VM's state. An instance is live until the agent reports Stopped.
	// +optional
	Phase VMPhase `json:"phase,omitempty"`
	// bootStage is the guest agent's last reported boot stage.
	// +optional
	BootStage string `json:"bootStage,omitempty"`
	// xcodeVersions lists the Xcode versions found in the guest.
	// +optional
	// +listType=set
	XcodeVersions []string `json:"xcodeVersions,omitempty"`
	// diskHeadroom is the free space on the guest's system volume.
	// +optional
	DiskHeadroom *resource.Quantity `json:"diskHeadroom,omitempty"`
	// readyForWork is the guest agent's verdict that the VM takes jobs.
	// +optional
	ReadyForWork bool `json:"readyForWork,omitempty"`
	// message explains the phase, for example a start error.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// lastReportAt is when the guest agent's report last changed, or was
	// last confirmed unchanged: the agent asks the guest every poll, writes
	// a changed report at once, and an unchanged one again only once this
	// is an hour old. Older than an hour, the guest has stopped answering.
	// +optional
	LastReportAt *metav1.Time `json:"lastReportAt,omitempty"`
	// pullPercent is how much of the golden the chassis has fetched while
	// the phase is Pulling.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	PullPercent *int32 `json:"pullPercent,omitempty"`
	// wipe is the evidence of the disk's destruction: what, how many bytes,
	// when and how.
	// +optional
	Wipe *fleetv1alpha1.WipeEvidence `json:"wipe,omitempty"`
	// startedAt is when the VM's current run, or its last one, started:
	// set by the report that first says Running after any other phase, and
	// kept until the next run starts. The audit stream's running record is
	// derived from it.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// lastStop is how the agent last stopped the VM, and why.
	// +optional
	LastStop *VMStop `json:"lastStop,omitempty"`
	// guestConfig is whether the agent opened the instance's sealed guest
	// configuration and handed it to the guest.
	// +optional
	GuestConfig *GuestConfigStatus `json:"guestConfig,omitempty"`
	// job is the one CI job the guest runs, as it reports it: a VM runs
	// one job, and is then destroyed.
	// +optional
	Job *GuestJob `json:"job,omitempty"`
	// wipedAt is when the host agent finished wiping the instance's disk.
	// The agent removes macrack.io/disk-wipe only after recording it
	// (instance.wipe).
	// +optional
	WipedAt *metav1.Time `json:"wipedAt,omitempty"`
}

// GuestConfigPhase is what became of an instance's sealed guest config.
// +kubebuilder:validation:Enum=Delivered;Unreadable
type GuestConfigPhase string

// The guest config phases.
const (
	// GuestConfigDelivered: the agent opened it and the guest took it.
	GuestConfigDelivered GuestConfigPhase = "Delivered"
	// GuestConfigUnreadable: it does not open with this chassis' key (sealed
	// to another key, another instance or node, or corrupt). The VM gets
	// nothing; its owner should make a new instance.
	GuestConfigUnreadable GuestConfigPhase = "Unreadable"
)

// GuestConfigStatus is the agent's report on a sealed guest config.
type GuestConfigStatus struct {
	// phase is Delivered or Unreadable.
	// +required
	Phase GuestConfigPhase `json:"phase"`
	// message says why a config is unreadable; it never holds the config.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Message string `json:"message,omitempty"`
}

// JobPhase is where the guest's one job stands.
// +kubebuilder:validation:Enum=Waiting;Running;Succeeded;Failed
type JobPhase string

// The job phases.
const (
	// JobWaiting: configured, asking for a job.
	JobWaiting JobPhase = "Waiting"
	// JobRunning: a job was taken and runs.
	JobRunning JobPhase = "Running"
	// JobSucceeded and JobFailed: the job ended; the VM takes no other.
	JobSucceeded JobPhase = "Succeeded"
	JobFailed    JobPhase = "Failed"
)

// GuestJob is the guest's report of its one job.
type GuestJob struct {
	// phase is Waiting, Running, Succeeded or Failed.
	// +required
	Phase JobPhase `json:"phase"`
	// id is the CI system's job id, once a job was taken.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ID int64 `json:"id,omitempty"`
	// startedAt is when the guest took the job.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// finishedAt is when the job ended.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// queuedSeconds is how long the job waited in the CI system's queue
	// before this guest took it, as the CI system says.
	// +optional
	// +kubebuilder:validation:Minimum=0
	QueuedSeconds *int64 `json:"queuedSeconds,omitempty"`
	// failureReason is the CI system's failure reason for a failed job, for
	// example script_failure or runner_system_failure.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	FailureReason string `json:"failureReason,omitempty"`
	// exitCode is the job script's exit code, when it ran to an end.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
}

// StopMethod is how a VM was stopped, gentlest first.
// +kubebuilder:validation:Enum=GuestShutdown;RequestStop;Forced
type StopMethod string

// The stop methods, in the order the agent tries them.
const (
	// StopGuestShutdown: the guest agent was asked to shut macOS down, and did.
	StopGuestShutdown StopMethod = "GuestShutdown"
	// StopRequestStop: Virtualization.framework's requestStop (the power
	// button) brought the guest down within the grace period.
	StopRequestStop StopMethod = "RequestStop"
	// StopForced: the VM was forced off after the grace period; its disk
	// may not be consistent.
	StopForced StopMethod = "Forced"
)

// VMStop records one stop of a VM.
type VMStop struct {
	// method is how the VM went down.
	// +required
	Method StopMethod `json:"method"`
	// reason is why the agent stopped it, for example ChassisQuarantined.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason,omitempty"`
	// at is when the VM was down.
	// +required
	At metav1.Time `json:"at"`
}

// The reasons the agent gives in VMStop.reason.
const (
	// StopReasonChassisQuarantined: the chassis' kernel VM quota stuck.
	StopReasonChassisQuarantined = "ChassisQuarantined"
	// StopReasonInstanceDeleted: the instance was deleted.
	StopReasonInstanceDeleted = "InstanceDeleted"
)

// MacOSInstanceStatus is split by owner: nodeName and the Placed condition are
// the operator's, runtime is the host agent's. It has no audit journal: the
// instance's audit records are derived from these facts (nodeName with the
// Placed condition, runtime.startedAt, lastStop and wipe), and the exporter
// holds the instance's finalizer until they are out.
type MacOSInstanceStatus struct {
	// nodeName is the Node the operator placed the instance on, after it
	// claimed a slot there. It is a selectable field, so that each agent
	// watches only its own instances.
	// +optional
	NodeName string `json:"nodeName,omitempty"`

	// observedGeneration is the generation the operator last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Placed (operator), Ready (agent).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// runtime is the host agent's report of the VM.
	// +optional
	Runtime *RuntimeStatus `json:"runtime,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mi,categories=macrack
// +kubebuilder:selectablefield:JSONPath=`.status.nodeName`
// +kubebuilder:selectablefield:JSONPath=`.spec.leaseName`
// +kubebuilder:printcolumn:name="Lease",type=string,JSONPath=`.spec.leaseName`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.imageName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.runtime.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Placed")].reason`
// +kubebuilder:printcolumn:name="Ready",type=boolean,JSONPath=`.status.runtime.readyForWork`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// MacOSInstance is one macOS VM inside a lease.
type MacOSInstance struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec MacOSInstanceSpec `json:"spec"`
	// +optional
	Status MacOSInstanceStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MacOSInstanceList contains a list of MacOSInstance.
type MacOSInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MacOSInstance `json:"items"`
}
