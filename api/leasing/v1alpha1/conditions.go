package v1alpha1

// Condition types of a MacNodeLease.
const (
	// ConditionBound: a chassis is bound to the lease.
	ConditionBound = "Bound"
	// ConditionHeld: the lease was deleted before earliestReleaseAt.
	ConditionHeld = "Held"
	// ConditionReleased: the chassis went back to the pool.
	ConditionReleased = "Released"
)

// Reasons used on lease conditions.
const (
	ReasonBound            = "Bound"
	ReasonNoCapacity       = "NoCapacity"
	ReasonClassNotFound    = "ClassNotFound"
	ReasonPolicyDenied     = "PolicyDenied"
	ReasonDeletedEarly     = "DeletedBeforeEarliestRelease"
	ReasonNotDeleted       = "NotDeleted"
	ReasonReleased         = "Released"
	ReasonAwaitingDiskWipe = "AwaitingDiskWipe"
	ReasonAwaitingRelease  = "AwaitingRelease"
	ReasonNotBound         = "NotBound"
)

// Finalizer is the operator's finalizer on every MacNodeLease. It keeps a
// deleted lease, in Held, until earliestReleaseAt.
const Finalizer = "macrack.io/lease"
