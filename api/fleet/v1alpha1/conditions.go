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
)

// Condition types of a MacNodeClass.
const (
	// ConditionCommercial: the class meets node.commercial and quota.never-circumvent.
	ConditionCommercial = "Commercial"
)

// Reasons used on fleet conditions.
const (
	ReasonCompliant          = "Compliant"
	ReasonPolicyViolation    = "PolicyViolation"
	ReasonNotReported        = "NotReported"
	ReasonClassNotFound      = "ClassNotFound"
	ReasonHeartbeatCurrent   = "HeartbeatCurrent"
	ReasonHeartbeatMissed    = "HeartbeatMissed"
	ReasonBound              = "Bound"
	ReasonFree               = "Free"
	ReasonQuotaStuck         = "QuotaStuck"
	ReasonQuotaOK            = "QuotaOK"
	ReasonAwaitingCompliance = "AwaitingCompliance"
	ReasonRetired            = "Retired"
	// ReasonDiskLeftUnwiped (an Event): the operator let an instance of a
	// retired chassis go without its disk wiped.
	ReasonDiskLeftUnwiped = "DiskLeftUnwiped"
	// ReasonVMReaped and ReasonDiskReaped (the agent's Events): a VM that
	// holds no slot was stopped; the disk of an instance that is gone was
	// wiped.
	ReasonVMReaped   = "VMReaped"
	ReasonDiskReaped = "DiskReaped"
)
