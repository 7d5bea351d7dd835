package v1alpha1

// Condition types of a MacNode.
const (
	// ConditionHardwareCompliant: the reported facts meet the class, the
	// virtualization entitlement is present, SIP is on and no boot-arg touches
	// the VM quota.
	ConditionHardwareCompliant = "HardwareCompliant"
	// ConditionAgentReady: the host agent heartbeats.
	ConditionAgentReady = "AgentReady"
	// ConditionLeased: a lease holds the chassis.
	ConditionLeased = "Leased"
	// ConditionReady: the chassis may be leased or already serves its lease.
	ConditionReady = "Ready"
	// ConditionQuotaHealthy: the kernel VM quota is not stuck.
	ConditionQuotaHealthy = "QuotaHealthy"
	// ConditionQuarantined: the quarantine loop holds the chassis: its
	// quota stuck, and it is being stopped, rebooted and probed. The
	// reason says the step.
	ConditionQuarantined = "Quarantined"
	// ConditionNeedsAttention: the chassis stuck more than
	// MaxQuarantinesPerDay times in 24 hours; a person must look.
	ConditionNeedsAttention = "NeedsAttention"
)

// Condition types of a MacNodeClass.
const (
	// ConditionCommercial: the class meets node.commercial and quota.never-circumvent.
	ConditionCommercial = "Commercial"
)

// Reasons used on fleet conditions.
const (
	ReasonCompliant        = "Compliant"
	ReasonPolicyViolation  = "PolicyViolation"
	ReasonNotReported      = "NotReported"
	ReasonClassNotFound    = "ClassNotFound"
	ReasonHeartbeatCurrent = "HeartbeatCurrent"
	ReasonHeartbeatMissed  = "HeartbeatMissed"
	ReasonBound            = "Bound"
	ReasonFree             = "Free"
	ReasonQuotaStuck       = "QuotaStuck"
	ReasonQuotaOK          = "QuotaOK"
	// The quarantine loop's steps, as Quarantined's reasons and as Events.
	// ReasonStoppingVMs: fenced; the agent stops the VMs gracefully.
	ReasonStoppingVMs = "StoppingVMs"
	// ReasonRebootRequested: the VMs are stopped; the host reboots.
	ReasonRebootRequested = "RebootRequested"
	// ReasonRebooted: the agent reports a new boot; the probe is awaited.
	ReasonRebooted = "Rebooted"
	// ReasonRecovered: the probe passed; the chassis serves again.
	ReasonRecovered = "Recovered"
	// ReasonTooManyQuarantines: NeedsAttention's reason.
	ReasonTooManyQuarantines = "TooManyQuarantines"
	// ReasonQuarantineStarted (an Event): the chassis was fenced.
	ReasonQuarantineStarted  = "QuarantineStarted"
	ReasonAwaitingCompliance = "AwaitingCompliance"
	// ReasonAwaitingFacts: Ready's reason while the agent has not reported
	// the facts the policies judge; the chassis is not judged until then.
	ReasonAwaitingFacts = "AwaitingFacts"
	ReasonRetired       = "Retired"
	// ReasonDiskLeftUnwiped (an Event): the operator let an instance of a
	// retired chassis go without its disk wiped.
	ReasonDiskLeftUnwiped = "DiskLeftUnwiped"
	// ReasonVMReaped and ReasonDiskReaped (the agent's Events): a VM that
	// holds no slot was stopped; the disk of an instance that is gone was
	// wiped.
	ReasonVMReaped   = "VMReaped"
	ReasonDiskReaped = "DiskReaped"

	// MacOSImage's Resolved condition.
	ReasonResolved = "Resolved"
	// ReasonRegistryUnreachable: the registry did not answer, or refused
	// the credentials; the operator retries with backoff.
	ReasonRegistryUnreachable = "RegistryUnreachable"
	// ReasonNotAGolden: the artifact is not a valid golden (media types,
	// limits, annotations); retrying cannot help, the digest pins it.
	ReasonNotAGolden = "NotAGolden"
	// ReasonPullSecretInvalid: spec.pullSecretName names no usable Secret.
	ReasonPullSecretInvalid = "PullSecretInvalid"
	// ReasonImageEvicted (an Event): a chassis evicted its copy of the golden
	// to make room.
	ReasonImageEvicted = "ImageEvicted"
)

// Condition types of a MacOSImage.
const (
	// ConditionResolved: the operator read the golden's manifest and config
	// from the registry, and they are a valid golden.
	ConditionResolved = "Resolved"
)
