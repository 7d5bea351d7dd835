package v1alpha1

// Condition types of a MacOSInstance.
const (
	// ConditionPlaced: the operator claimed a slot and set status.nodeName.
	ConditionPlaced = "Placed"
	// ConditionReady: the guest reports ready-for-work (agent).
	ConditionReady = "Ready"
	// ConditionPod: the instance's Pod, in its namespace, stands for it
	// (operator). False says why not, for example that a PodSecurity level,
	// a ResourceQuota or a webhook refused it; the VM runs on regardless.
	ConditionPod = "Pod"
)

// Reasons used on instance conditions.
const (
	ReasonPlaced           = "Placed"
	ReasonCapacityExceeded = "CapacityExceeded"
	ReasonClassNotFound    = "ClassNotFound"
	ReasonLeaseNotBound    = "LeaseNotBound"
	ReasonPolicyDenied     = "PolicyDenied"
	// ReasonPodCurrent: the Pod exists and mirrors the instance.
	ReasonPodCurrent = "PodCurrent"
	// ReasonPodRefused: admission refused the Pod (PodSecurity, a
	// ResourceQuota, a webhook); it is tried again.
	ReasonPodRefused = "PodRefused"
	// ReasonPodNameTaken: a Pod the instance does not control holds its name.
	ReasonPodNameTaken = "PodNameTaken"
	// ReasonNotPlaced: no Pod until the instance holds a slot on a chassis.
	ReasonNotPlaced = "NotPlaced"
)
