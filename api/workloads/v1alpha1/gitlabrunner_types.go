package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GitLabRunnerSpec asks for a pool of fresh macOS VMs, one per GitLab CI
// job, inside one of the tenant's leases.
type GitLabRunnerSpec struct {
	// leaseName names the MacNodeLease, in this namespace, whose chassis
	// runs the jobs. The runner waits while the lease is not Bound.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="leaseName is immutable"
	LeaseName string `json:"leaseName"`

	// imageName names the MacOSImage (macOS plus Xcode) every job's VM is
	// cloned from.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ImageName string `json:"imageName"`

	// template sizes each job's VM.
	// +required
	Template InstanceTemplate `json:"template"`

	// concurrency is how many jobs run at once, each in its own VM: 1 or 2,
	// and never more than the lease's class vmCapacity. It is also the warm
	// pool: that many VMs are kept booted and waiting for a job.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2
	Concurrency int32 `json:"concurrency,omitempty"`

	// gitlab says where the jobs come from.
	// +required
	GitLab GitLabSpec `json:"gitlab"`

	// tags are the runner's tags, as configured in GitLab for its runner
	// authentication token. MacRack reports them; GitLab decides which jobs
	// they match.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[^,]+$`
	Tags []string `json:"tags,omitempty"`

	// maxJobDuration ends a job that runs longer, and destroys its VM,
	// whatever timeout the job asks for.
	// +optional
	// +kubebuilder:default="3h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('72h')",message="maxJobDuration must be between 1m and 72h"
	MaxJobDuration metav1.Duration `json:"maxJobDuration,omitempty"`
}

// InstanceTemplate sizes the VMs a workload creates.
type InstanceTemplate struct {
	// cpu is the number of virtual CPUs.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	CPU int32 `json:"cpu"`
	// memory is the VM's memory, for example 8Gi.
	// +required
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))",message="memory must be a positive quantity"
	Memory resource.Quantity `json:"memory"`
	// disk is the VM's disk, for example 200Gi: a fresh clone of the golden
	// for every job, wiped when the job ends.
	// +required
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))",message="disk must be a positive quantity"
	Disk resource.Quantity `json:"disk"`
}

// GitLabSpec is the GitLab instance and the runner's credentials.
type GitLabSpec struct {
	// url is the GitLab instance, for example https://gitlab.com.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() == 'https' && url(self).getHostname() != '' && !self.contains('@') && !self.contains('?') && !self.contains('#')",message="url must be an https URL with a host, and no credentials, query or fragment"
	URL string `json:"url"`
	// tokenSecretRef names the Secret, in this namespace, that holds the
	// runner authentication token (glrt-…). The controller reads it as the
	// namespace's macrack-gitlab-runner ServiceAccount, which the tenant
	// grants get on it; the token reaches only GitLab and the guest.
	// +required
	TokenSecretRef SecretKeyRef `json:"tokenSecretRef"`
	// caBundle is extra PEM roots to trust for url, for a GitLab with a
	// private CA. Each VM's sealed config carries it, so it is at most
	// 10 KiB: a few certificates.
	// +optional
	// +kubebuilder:validation:MaxLength=10240
	CABundle string `json:"caBundle,omitempty"`
}

// SecretKeyRef names one key of a Secret in the object's namespace.
type SecretKeyRef struct {
	// name is the Secret's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key is the key in the Secret's data: "token" (RunnerTokenKey), the
	// only key accepted. Any other key could make the controller send
	// another credential of the Secret to GitLab.
	// +optional
	// +kubebuilder:default=token
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == 'token'",message="key must be \"token\": the runner token Secret holds the token under the key token, and no other key is read"
	Key string `json:"key,omitempty"`
}

// RunnerTokenKey is the one key of the runner token Secret that a
// GitLabRunner reads. The CRD's rule on tokenSecretRef.key spells it too.
const RunnerTokenKey = "token"

// JobResult is how one job ended, from the runner's side.
// +kubebuilder:validation:Enum=Succeeded;Failed;SystemFailure;TimedOut;Canceled
type JobResult string

// The job results.
const (
	// JobSucceeded: the script passed.
	JobSucceeded JobResult = "Succeeded"
	// JobFailed: the script failed (GitLab's script_failure).
	JobFailed JobResult = "Failed"
	// JobSystemFailure: the VM was stopped under the job (a quarantine, a
	// host reboot) or failed; reported to GitLab as runner_system_failure,
	// or runner_interrupted when a healthy runner was told to stop, never
	// as the tenant's fault, so GitLab's retry rule may run it again.
	JobSystemFailure JobResult = "SystemFailure"
	// JobTimedOut: the job ran past its timeout or maxJobDuration.
	JobTimedOut JobResult = "TimedOut"
	// JobCanceled: the runner was deleted while the job ran.
	JobCanceled JobResult = "Canceled"
)

// JobRecord is one finished job, for the runner's recent history.
type JobRecord struct {
	// id is GitLab's job id.
	// +required
	// +kubebuilder:validation:Minimum=0
	ID int64 `json:"id"`
	// instance is the MacOSInstance that ran it, destroyed since.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Instance string `json:"instance"`
	// slot is the pool slot the VM filled.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	Slot int32 `json:"slot"`
	// result is how it ended.
	// +required
	Result JobResult `json:"result"`
	// failureReason is GitLab's failure reason, when it failed.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	FailureReason string `json:"failureReason,omitempty"`
	// queueToStart is how long the job waited in GitLab's queue before its
	// VM took it.
	// +optional
	QueueToStart *metav1.Duration `json:"queueToStart,omitempty"`
	// duration is how long it ran in its VM.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// finishedAt is when it ended.
	// +required
	FinishedAt metav1.Time `json:"finishedAt"`
}

// PoolSlot is one place in the warm pool. Its systemID is stable across the
// VMs that fill it, so GitLab sees one runner manager per slot, not one per
// job.
type PoolSlot struct {
	// index is the slot's number, 0 or 1.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	Index int32 `json:"index"`
	// systemID is the runner manager's system_id in GitLab.
	// +required
	// +kubebuilder:validation:MaxLength=64
	SystemID string `json:"systemID"`
	// generation counts the VMs that filled the slot; the current one's
	// name ends with it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Generation int64 `json:"generation,omitempty"`
	// instance is the MacOSInstance filling the slot now, if any.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Instance string `json:"instance,omitempty"`
	// state is the slot's VM: Creating, Booting, Idle, Busy, Draining or
	// Waiting (for the chassis or for capacity).
	// +optional
	// +kubebuilder:validation:Enum=Creating;Booting;Idle;Busy;Draining;Waiting
	State SlotState `json:"state,omitempty"`
	// jobID is the job its VM runs, while Busy.
	// +optional
	JobID int64 `json:"jobID,omitempty"`
}

// SlotState is what a pool slot's VM is doing.
type SlotState string

// The slot states.
const (
	SlotCreating SlotState = "Creating"
	SlotBooting  SlotState = "Booting"
	SlotIdle     SlotState = "Idle"
	SlotBusy     SlotState = "Busy"
	SlotDraining SlotState = "Draining"
	SlotWaiting  SlotState = "Waiting"
)

// GitLabRunnerStatus is written by the GitLabRunner controller.
type GitLabRunnerStatus struct {
	// observedGeneration is the generation the controller last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Registered (GitLab accepted the token), Ready (the warm
	// pool is full), Degraded (something keeps the runner from its
	// concurrency).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// idle counts VMs booted and waiting for a job.
	// +optional
	Idle int32 `json:"idle"`
	// busy counts VMs running a job.
	// +optional
	Busy int32 `json:"busy"`
	// slots are the warm pool's places.
	// +optional
	// +listType=map
	// +listMapKey=index
	// +kubebuilder:validation:MaxItems=2
	Slots []PoolSlot `json:"slots,omitempty"`
	// jobs are the most recent finished jobs, newest last.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Jobs []JobRecord `json:"jobs,omitempty"`
	// jobsTotal counts every job the runner finished.
	// +optional
	JobsTotal int64 `json:"jobsTotal,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=glr,categories=macrack
// +kubebuilder:printcolumn:name="Lease",type=string,JSONPath=`.spec.leaseName`
// +kubebuilder:printcolumn:name="Concurrency",type=integer,JSONPath=`.spec.concurrency`
// +kubebuilder:printcolumn:name="Idle",type=integer,JSONPath=`.status.idle`
// +kubebuilder:printcolumn:name="Busy",type=integer,JSONPath=`.status.busy`
// +kubebuilder:printcolumn:name="Registered",type=string,JSONPath=`.status.conditions[?(@.type=="Registered")].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Jobs",type=integer,JSONPath=`.status.jobsTotal`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 48",message="a GitLabRunner's name is at most 48 characters: its VMs are named after it"

// GitLabRunner runs a tenant's GitLab CI jobs on its leased chassis, one
// fresh macOS VM per job. It acts as a tenant: it only creates and deletes
// MacOSInstances in the lease, under the namespace's macrack-gitlab-runner
// ServiceAccount, and MacRack's policies refuse it what they refuse anyone.
type GitLabRunner struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec GitLabRunnerSpec `json:"spec"`
	// +optional
	Status GitLabRunnerStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// GitLabRunnerList contains a list of GitLabRunner.
type GitLabRunnerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GitLabRunner `json:"items"`
}
