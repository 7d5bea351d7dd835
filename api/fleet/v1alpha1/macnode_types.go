package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// MacNodePhase is where a chassis is in its life.
// +kubebuilder:validation:Enum=Pending;Enrolled;Ready;Leased;Quarantined;Rebooting;Retired
type MacNodePhase string

// The phases of a MacNode.
const (
	// MacNodePending: recorded at unboxing; its agent has not reported the
	// facts the policies judge (ReportedFacts.UnreportedFacts), so it is
	// not judged yet: it waits for facts.
	MacNodePending MacNodePhase = "Pending"
	// MacNodeEnrolled: its agent reported its facts, but the chassis is not
	// fit to lease: a rule refuses them (HardwareCompliant says which), or
	// its agent is silent (AgentReady=False, HeartbeatMissed).
	MacNodeEnrolled MacNodePhase = "Enrolled"
	// MacNodeReady: commercial hardware, healthy agent, free to lease.
	MacNodeReady MacNodePhase = "Ready"
	// MacNodeLeased: bound to one tenant's lease.
	MacNodeLeased MacNodePhase = "Leased"
	// MacNodeQuarantined: the kernel VM quota is stuck; no new instances.
	MacNodeQuarantined MacNodePhase = "Quarantined"
	// MacNodeRebooting: the host is rebooting to clear a stuck quota.
	MacNodeRebooting MacNodePhase = "Rebooting"
	// MacNodeRetired: taken out of service for good.
	MacNodeRetired MacNodePhase = "Retired"
)

// Fenced reports whether p is one of the quarantine loop's phases, in
// which the chassis starts no VM and takes no new instance.
func (p MacNodePhase) Fenced() bool { return p == MacNodeQuarantined || p == MacNodeRebooting }

// MacNodeSpec names one physical chassis.
// +kubebuilder:validation:XValidation:rule="self.serial == oldSelf.serial",message="serial is immutable",fieldPath=".serial"
// +kubebuilder:validation:XValidation:rule="!oldSelf.?retired.orValue(false) || self.?retired.orValue(false)",message="a retired chassis stays retired: enrol its replacement under its own serial",fieldPath=".retired"
type MacNodeSpec struct {
	// serial is the chassis serial as Apple prints it, for example C02XL0GHJGH5.
	// It is immutable. The MacNode and its Node are named after it in lower case.
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Z0-9]{8,17}$`
	Serial string `json:"serial"`

	// nodeClassName names the MacNodeClass (the SKU) of this chassis.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeClassName string `json:"nodeClassName"`

	// retired takes the chassis out of service for good, for example
	// because its Mac is dead. It cannot be undone. A retired chassis is
	// never leased again; the operator lets go of its instances without
	// their disks wiped, and records each unwiped disk in
	// status.unwipedDisks, so that a dead Mac does not hold its tenant's
	// namespace forever.
	// +optional
	Retired bool `json:"retired,omitempty"`

	// address is the chassis' IP address on the network the API server
	// reaches it on, set at enrolment. The operator publishes it as the
	// Node's only address (InternalIP), where the API server sends
	// kubectl exec and logs; the agent cannot change it (agent.scope).
	// Empty: the Node has no address, and exec and logs cannot reach it.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() in [4, 6] && !ip(self).isUnspecified()",message="address must be an IPv4 or IPv6 address in canonical form, not unspecified"
	// +kubebuilder:validation:XValidation:rule="ip.isCanonical(self)",message="address must be in canonical form (for example 10.0.0.5 or 2001:db8::5)"
	Address string `json:"address,omitempty"`
}

// QuotaStateName is the host agent's view of the kernel VM quota.
// +kubebuilder:validation:Enum=OK;Stuck
type QuotaStateName string

// The states of the kernel VM quota.
const (
	// QuotaOK: starts succeed up to the class's capacity.
	QuotaOK QuotaStateName = "OK"
	// QuotaStuck: the kernel refused a start with VZ error code 6 while fewer
	// than two VMs ran. Only a host reboot clears it.
	QuotaStuck QuotaStateName = "Stuck"
)

// QuotaReport is the agent's report of hv_apple_isa_vm_quota behaviour.
type QuotaReport struct {
	// state is OK, or Stuck after a code-6 refusal below capacity.
	// +required
	State QuotaStateName `json:"state"`
	// runningVMs is how many VMs the agent runs right now.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RunningVMs int32 `json:"runningVMs,omitempty"`
	// lastErrorCode is the last VZErrorDomain code seen on a start, if any.
	// +optional
	LastErrorCode int32 `json:"lastErrorCode,omitempty"`
	// lastErrorAt is when the agent saw lastErrorCode.
	// +optional
	LastErrorAt *metav1.Time `json:"lastErrorAt,omitempty"`
	// bootID is the host boot this report is about. A stuck counter lasts
	// until the host reboots, so a report of an earlier boot is stale.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID,omitempty"`
	// probe is the agent's last probe of the quota: one VM started and
	// stopped cleanly after a reboot, which proves the counter healthy.
	// Nothing public exposes the kernel's active-VM count.
	// +optional
	Probe *QuotaProbe `json:"probe,omitempty"`
}

// ProbeResult is how a quota probe ended.
// +kubebuilder:validation:Enum=Passed;Failed
type ProbeResult string

// The probe results.
const (
	// ProbePassed: the probe VM started and stopped cleanly.
	ProbePassed ProbeResult = "Passed"
	// ProbeFailed: the probe VM did not start, or did not stop cleanly.
	ProbeFailed ProbeResult = "Failed"
)

// QuotaProbe is one start and stop of a probe VM, with no tenant's disk.
type QuotaProbe struct {
	// bootID is the host boot the probe ran in.
	// +required
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID"`
	// result is Passed or Failed.
	// +required
	Result ProbeResult `json:"result"`
	// image is the cached golden the probe VM booted from; empty in the
	// sim, whose VMs need no golden.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Image string `json:"image,omitempty"`
	// message says why a probe failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// at is when the probe ended.
	// +required
	At metav1.Time `json:"at"`
}

// ReportedFacts are the host agent's hardware and software facts. The agent
// writes them and only them; they are always stored, even when they fail the
// class, so that the operator can say why a node is not Ready.
type ReportedFacts struct {
	// disk is the internal SSD size.
	// +optional
	Disk *resource.Quantity `json:"disk,omitempty"`
	// networkGbps is the negotiated NIC speed.
	// +optional
	NetworkGbps *int32 `json:"networkGbps,omitempty"`
	// chip is the Apple silicon generation.
	// +optional
	Chip string `json:"chip,omitempty"`
	// memory is the unified memory.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// macOSVersion is the host's macOS version.
	// +optional
	MacOSVersion string `json:"macOSVersion,omitempty"`
	// sipEnabled is System Integrity Protection. A host with SIP off never becomes Ready.
	// +optional
	SIPEnabled *bool `json:"sipEnabled,omitempty"`
	// bootArgs is the host's NVRAM boot-args, verbatim.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	BootArgs string `json:"bootArgs,omitempty"`
	// virtualizationEntitlement is whether the agent's signature carries
	// com.apple.security.virtualization.
	// +optional
	VirtualizationEntitlement *bool `json:"virtualizationEntitlement,omitempty"`
	// quota is the kernel VM quota as the agent sees it.
	// +optional
	Quota *QuotaReport `json:"quota,omitempty"`
	// images lists the goldens in the chassis' cache, each with its pull
	// state. The operator counts a chassis in MacOSImage.status.replicas
	// only for a Ready copy.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Images []ReportedImage `json:"images,omitempty"`
	// imageCache is the golden cache's use against its budget.
	// +optional
	ImageCache *ImageCacheReport `json:"imageCache,omitempty"`
	// imagePulls are the agent's pull counters, by golden: cumulative, and
	// kept across the agent's restarts, for the operator to export as
	// Prometheus counters. A golden's counters outlive its eviction.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	ImagePulls []ImagePullCounters `json:"imagePulls,omitempty"`
	// wipes are the latest instance disks the agent destroyed, as evidence,
	// newest last. The operator copies them into status.history.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Wipes []WipeEvidence `json:"wipes,omitempty"`
	// inventory is what the chassis holds of its tenants: its VMs and its
	// instance disks. The operator returns the chassis to the pool only when
	// the inventory is reported, and empty.
	// +optional
	Inventory *HostInventory `json:"inventory,omitempty"`
	// agentVersion is the host agent's version.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`
	// guestKey is the public half of the agent's guest-config key. A
	// workload controller seals what a guest needs in secret (a CI runner's
	// token) to it, so that any agent may read the sealed blob on an
	// instance, but only this chassis' agent can open it.
	// +optional
	GuestKey *GuestKey `json:"guestKey,omitempty"`
	// bootID identifies the host's current boot: the boot session UUID on
	// a Mac (kern.bootsessionuuid), the sim host's boot id. It changes only
	// when the host reboots, so the operator reads a reboot from it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID,omitempty"`
}

// UnreportedFacts names, by their JSON names, the facts that node.commercial
// and quota.never-circumvent judge and that f leaves out: the disk, the NIC
// speed, SIP and the virtualization entitlement. A chassis is judged once
// its agent's facts report names them all. The agent's other loops (the
// golden cache, the inventory, the quota) write into status.reported
// before the facts arrive, and a chassis judged on those alone would be
// denied for facts its agent has not sent yet. A nil f leaves out all four.
func (f *ReportedFacts) UnreportedFacts() []string {
	if f == nil {
		return []string{"disk", "networkGbps", "sipEnabled", "virtualizationEntitlement"}
	}
	var out []string
	for _, fact := range []struct {
		name string
		set  bool
	}{
		{"disk", f.Disk != nil},
		{"networkGbps", f.NetworkGbps != nil},
		{"sipEnabled", f.SIPEnabled != nil},
		{"virtualizationEntitlement", f.VirtualizationEntitlement != nil},
	} {
		if !fact.set {
			out = append(out, fact.name)
		}
	}
	return out
}

// GuestKeyAlgorithm is the one sealing scheme: HPKE (RFC 9180) base mode
// with DHKEM(X25519, HKDF-SHA256), HKDF-SHA256 and AES-256-GCM.
const GuestKeyAlgorithm = "HPKE-X25519-SHA256-AES256GCM"

// GuestKey is a chassis' public key for sealed guest configuration.
type GuestKey struct {
	// algorithm is the sealing scheme; only HPKE-X25519-SHA256-AES256GCM.
	// +required
	// +kubebuilder:validation:Enum=HPKE-X25519-SHA256-AES256GCM
	Algorithm string `json:"algorithm"`
	// publicKey is the X25519 public key, standard base64 (32 bytes).
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{43}=$`
	PublicKey string `json:"publicKey"`
	// keyID is the first 8 bytes of the key's SHA-256, in hex: what a
	// sealed config names, so that a key the agent replaced is told apart.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{16}$`
	KeyID string `json:"keyID"`
}

// ImagePhase is a golden's state in one chassis' cache.
// +kubebuilder:validation:Enum=Pulling;Waiting;Ready;Failed
type ImagePhase string

// The image phases.
const (
	// ImagePulling: chunks are being fetched and verified.
	ImagePulling ImagePhase = "Pulling"
	// ImageWaiting: the pull waits for room in the cache that it cannot
	// make without evicting a golden in use or booked.
	ImageWaiting ImagePhase = "Waiting"
	// ImageReady: every chunk verified; instances clone from it.
	ImageReady ImagePhase = "Ready"
	// ImageFailed: a chunk failed its digest, or the artifact is refused;
	// its bytes are discarded.
	ImageFailed ImagePhase = "Failed"
)

// ReportedImage is one golden in a chassis' cache.
type ReportedImage struct {
	// name is the MacOSImage's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// digest is the golden's manifest digest.
	// +optional
	// +kubebuilder:validation:MaxLength=80
	Digest string `json:"digest,omitempty"`
	// phase is Pulling, Waiting, Ready or Failed.
	// +required
	Phase ImagePhase `json:"phase"`
	// bytesDone and bytesTotal are the compressed bytes fetched and to fetch.
	// +optional
	BytesDone int64 `json:"bytesDone,omitempty"`
	// +optional
	BytesTotal int64 `json:"bytesTotal,omitempty"`
	// bytesPerSecond is the recent pull rate.
	// +optional
	BytesPerSecond int64 `json:"bytesPerSecond,omitempty"`
	// message says why the pull waits or failed, with the chunk and both
	// digests for a mismatch.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// ImageCacheReport is the golden cache's allocated bytes against its budget.
type ImageCacheReport struct {
	// used is what the cache's files allocate on disk (as du counts).
	// +required
	Used resource.Quantity `json:"used"`
	// budget is the class's imageCacheBudget, or the agent's override.
	// +required
	Budget resource.Quantity `json:"budget"`
}

// MaxImagePullCounters bounds status.reported.imagePulls.
const MaxImagePullCounters = 64

// ImagePullCounters are one golden's pull counters on one chassis. Each
// only grows.
type ImagePullCounters struct {
	// name is the MacOSImage's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// pulls counts the pulls of the golden that completed, every byte
	// verified.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Pulls int64 `json:"pulls,omitempty"`
	// pullMilliseconds is the time those pulls took, summed, by the
	// agent's clock: each from its download's start to its last verified
	// byte.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PullMilliseconds int64 `json:"pullMilliseconds,omitempty"`
	// bytes counts the compressed bytes fetched from the registry for the
	// golden, in every pull, the retried and the failed included.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Bytes int64 `json:"bytes,omitempty"`
	// cacheHits counts the instance disks cloned from the golden that did
	// not wait for a pull: it was in the cache when the instance asked.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CacheHits int64 `json:"cacheHits,omitempty"`
}

// MaxWipeRecords bounds the wipe evidence a report or a history record keeps.
const MaxWipeRecords = 16

// WipeEvidence records one instance disk destroyed: what, how many bytes,
// when and how.
type WipeEvidence struct {
	// namespace, name and uid of the MacOSInstance whose disk this was.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +required
	UID types.UID `json:"uid"`
	// leaseName is the instance's lease, in the same namespace.
	// +required
	// +kubebuilder:validation:MaxLength=253
	LeaseName string `json:"leaseName"`
	// files are the instance's files removed: disk, auxiliary storage,
	// machine identifier.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=64
	Files []string `json:"files,omitempty"`
	// bytes is what those files allocated on disk when they were removed.
	// +required
	Bytes int64 `json:"bytes"`
	// method is how: "apfs-clone-unlink" (an APFS clone's own blocks are
	// freed by deleting it; the golden's shared blocks were never the
	// tenant's), "reflink-unlink", or "unlink" for a full copy.
	// +required
	// +kubebuilder:validation:Enum=apfs-clone-unlink;reflink-unlink;unlink
	Method string `json:"method"`
	// wipedAt is when the last file was gone.
	// +required
	WipedAt metav1.Time `json:"wipedAt"`
}

// HostInventory is what the host agent finds on the chassis: a VM for
// each VM helper it runs, and a disk for each instance directory. It lists
// what exists, whether or not an instance object still names it.
type HostInventory struct {
	// vms are the VMs on the chassis, by the UID of their instance.
	// +optional
	// +listType=map
	// +listMapKey=uid
	// +kubebuilder:validation:MaxItems=16
	VMs []HostVM `json:"vms,omitempty"`
	// disks are the UIDs of the instances whose disk is on the chassis.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	Disks []types.UID `json:"disks,omitempty"`
	// observedAt is when the agent looked.
	// +required
	ObservedAt metav1.Time `json:"observedAt"`
	// quarantinedAt is the quarantinedAt of the quarantine the agent had
	// seen when it looked, if any: the operator asks for the reboot only
	// on an inventory taken under that fence, whatever the two hosts'
	// clocks say.
	// +optional
	QuarantinedAt *metav1.Time `json:"quarantinedAt,omitempty"`
}

// HostVM is one VM on the chassis.
type HostVM struct {
	// uid of the instance the VM was started for.
	// +required
	UID types.UID `json:"uid"`
	// state is the VM's own state, as its helper reports it, or Unknown
	// when the helper does not answer.
	// +required
	// +kubebuilder:validation:MaxLength=32
	State string `json:"state"`
}

// Empty reports whether the inventory holds no VM and no disk.
func (i *HostInventory) Empty() bool { return i != nil && len(i.VMs) == 0 && len(i.Disks) == 0 }

// UnwipedDisk is an instance disk the operator let go without a wipe,
// because its chassis was retired: its SSD must be destroyed, not reused.
type UnwipedDisk struct {
	// +required
	Namespace string `json:"namespace"`
	// +required
	Name string `json:"name"`
	// +required
	UID types.UID `json:"uid"`
	// leaseName is the lease the instance ran under.
	// +optional
	LeaseName string `json:"leaseName,omitempty"`
	// recordedAt is when the operator removed the instance's
	// macrack.io/disk-wipe finalizer.
	// +required
	RecordedAt metav1.Time `json:"recordedAt"`
}

// Binding records which lease holds the chassis. It is authoritative: the
// operator writes it with optimistic concurrency, and nothing else may bind
// the chassis until it is cleared.
type Binding struct {
	// leaseNamespace is the tenant's namespace.
	// +required
	LeaseNamespace string `json:"leaseNamespace"`
	// leaseName is the MacNodeLease's name.
	// +required
	LeaseName string `json:"leaseName"`
	// leaseUID is the MacNodeLease's UID, so that a recreated lease of the same
	// name is not mistaken for the one that was bound.
	// +required
	LeaseUID types.UID `json:"leaseUID"`
	// boundAt is when the chassis was claimed.
	// +required
	BoundAt metav1.Time `json:"boundAt"`
	// earliestReleaseAt is boundAt plus the lease's minimumDuration. The chassis
	// stays with this tenant at least until then.
	// +required
	EarliestReleaseAt metav1.Time `json:"earliestReleaseAt"`
	// images are the MacOSImages the lease books (its spec.images), copied
	// here because agents cannot read leases: the chassis pulls them at
	// bind, and never evicts them while the lease holds it.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	Images []string `json:"images,omitempty"`
}

// Slot is one VM slot of the chassis, claimed by one instance.
type Slot struct {
	// namespace of the MacOSInstance.
	// +required
	Namespace string `json:"namespace"`
	// name of the MacOSInstance.
	// +required
	Name string `json:"name"`
	// uid of the MacOSInstance. The agent starts a VM only for a UID named here.
	// +required
	UID types.UID `json:"uid"`
}

// LeaseRecord is one past lease of this chassis, kept because Events expire.
type LeaseRecord struct {
	// +required
	LeaseNamespace string `json:"leaseNamespace"`
	// +required
	LeaseName string `json:"leaseName"`
	// +optional
	LeaseUID types.UID `json:"leaseUID,omitempty"`
	// +required
	BoundAt metav1.Time `json:"boundAt"`
	// +required
	ReleasedAt metav1.Time `json:"releasedAt"`
	// wipes are the instance disks of this lease that the agent destroyed.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Wipes []WipeEvidence `json:"wipes,omitempty"`
}

// MaxQuarantinesPerDay is how many quarantines of one chassis in 24 hours
// the operator repairs by a reboot. One more leaves the chassis Quarantined
// with NeedsAttention, for a person.
const MaxQuarantinesPerDay = 3

// QuarantineStatus is one quarantine of a chassis whose kernel VM quota
// stuck: fenced, its VMs stopped, rebooted, probed, and returned to the
// lease that held it. The operator writes it; every step stamps a time.
type QuarantineStatus struct {
	// bootID is the host boot in which the quota stuck. The reboot is
	// proven when the agent reports another.
	// +required
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID"`
	// evidence is the agent's report that started the quarantine.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Evidence string `json:"evidence"`
	// quarantinedAt is when the operator fenced the chassis.
	// +required
	QuarantinedAt metav1.Time `json:"quarantinedAt"`
	// rebootRequestedAt is when the operator asked the agent to reboot the
	// host, once its VMs were stopped.
	// +optional
	RebootRequestedAt *metav1.Time `json:"rebootRequestedAt,omitempty"`
	// rebootedAt is when the agent first reported a boot other than bootID.
	// +optional
	RebootedAt *metav1.Time `json:"rebootedAt,omitempty"`
	// recoveredAt is when a probe in the new boot passed and the chassis
	// returned to service.
	// +optional
	RecoveredAt *metav1.Time `json:"recoveredAt,omitempty"`
	// needsAttention: this was more than MaxQuarantinesPerDay quarantines
	// in 24 hours. The chassis is not rebooted again, never returns to the
	// pool, and waits for a person.
	// +optional
	NeedsAttention bool `json:"needsAttention,omitempty"`
}

// Active reports whether the quarantine still fences the chassis.
func (q *QuarantineStatus) Active() bool { return q != nil && q.RecoveredAt == nil }

// MacNodeStatus is split by owner: reported belongs to the host agent,
// everything else to the operator.
type MacNodeStatus struct {
	// phase is the operator's summary of the chassis' state.
	// +optional
	Phase MacNodePhase `json:"phase,omitempty"`

	// observedGeneration is the generation the operator last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are the operator's: HardwareCompliant, AgentReady, Leased, Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// reported holds the host agent's facts. Only the agent writes it.
	// +optional
	Reported *ReportedFacts `json:"reported,omitempty"`

	// binding is the lease that holds this chassis, if any.
	// +optional
	Binding *Binding `json:"binding,omitempty"`

	// slots are the VM slots claimed by instances; at most the class's vmCapacity.
	// +optional
	// +listType=map
	// +listMapKey=uid
	// +kubebuilder:validation:MaxItems=2
	Slots []Slot `json:"slots,omitempty"`

	// history lists past leases, newest last, bounded.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	History []LeaseRecord `json:"history,omitempty"`

	// unwipedDisks are the instance disks left on this chassis unwiped,
	// each let go by the operator once the chassis was retired. Part of the
	// chassis' history: it is never cleared.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	UnwipedDisks []UnwipedDisk `json:"unwipedDisks,omitempty"`

	// quarantine is the chassis' current quarantine, or its last one.
	// +optional
	Quarantine *QuarantineStatus `json:"quarantine,omitempty"`

	// recentQuarantines are when the latest quarantines began, newest last:
	// more than MaxQuarantinesPerDay in 24 hours needs a person.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	RecentQuarantines []metav1.Time `json:"recentQuarantines,omitempty"`

	// audit is this object's journal of unexported transitions; see
	// AuditJournal for who writes what.
	// +optional
	Audit *AuditJournal `json:"audit,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mn,categories=macrack
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.serial.lowerAscii()",message="metadata.name must be spec.serial in lower case",fieldPath=".spec.serial"
// +kubebuilder:printcolumn:name="Serial",type=string,JSONPath=`.spec.serial`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.nodeClassName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.status.conditions[?(@.type=="AgentReady")].reason`
// +kubebuilder:printcolumn:name="Tenant",type=string,JSONPath=`.status.binding.leaseNamespace`
// +kubebuilder:printcolumn:name="Lease",type=string,JSONPath=`.status.binding.leaseName`
// +kubebuilder:printcolumn:name="Quarantined",type=date,JSONPath=`.status.quarantine.quarantinedAt`,priority=1
// +kubebuilder:printcolumn:name="Recovered",type=date,JSONPath=`.status.quarantine.recoveredAt`,priority=1
// +kubebuilder:printcolumn:name="Goldens",type=string,JSONPath=`.status.reported.images[*].name`,priority=1
// +kubebuilder:printcolumn:name="Pulls",type=string,JSONPath=`.status.reported.images[*].phase`,priority=1
// +kubebuilder:printcolumn:name="Retired",type=boolean,JSONPath=`.spec.retired`,priority=1
// +kubebuilder:printcolumn:name="Release After",type=string,format=date-time,JSONPath=`.status.binding.earliestReleaseAt`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// MacNode is one physical Mac mini, by serial.
type MacNode struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec MacNodeSpec `json:"spec"`
	// +optional
	Status MacNodeStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MacNodeList contains a list of MacNode.
type MacNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MacNode `json:"items"`
}
