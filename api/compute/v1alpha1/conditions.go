package v1alpha1

// Condition types of a MacOSInstance.
const (
	// ConditionPlaced: the operator claimed a slot and set status.nodeName.
	ConditionPlaced = "Placed"
	// ConditionReady: the guest reports ready-for-work (agent).
	ConditionReady = "Ready"
)

// Reasons used on instance conditions.
const (
	ReasonPlaced           = "Placed"
	ReasonCapacityExceeded = "CapacityExceeded"
	ReasonClassNotFound    = "ClassNotFound"
	ReasonLeaseNotBound    = "LeaseNotBound"
	ReasonPolicyDenied     = "PolicyDenied"
)
