package v1alpha1

// Condition types of a MacNodeLease.
const (
	// ConditionBound: a chassis is bound to the lease.
	ConditionBound = "Bound"
	// ConditionHeld: the lease was deleted before earliestReleaseAt.
	ConditionHeld = "Held"
	// ConditionReleased: the chassis went back to the pool.
	ConditionReleased = "Released"
	// ConditionImagesReady: every image in spec.images has verified on the
	// bound chassis.
	ConditionImagesReady = "ImagesReady"
	// ConditionChassisAvailable: the bound chassis serves the lease. False
	// while it is quarantined (its kernel VM quota stuck, and MacRack
	// reboots it), or when it needs a person.
	ConditionChassisAvailable = "ChassisAvailable"
	// ConditionRecorded: the lease controller's last status write went
	// through. Set only once a write was refused (False, with the rule
	// id), and True again once one goes through: while False, the lease
	// keeps its finalizer, so that no audit record is lost.
	ConditionRecorded = "Recorded"
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
	// ReasonChassisNotEmpty: the lease's instances are wiped, but the
	// chassis' agent still reports a VM or an instance disk on it.
	ReasonChassisNotEmpty = "ChassisNotEmpty"
	// ReasonChassisRetired: the chassis was retired; the lease let go of it
	// without its disks wiped, as its history records.
	ReasonChassisRetired = "ChassisRetired"
	ReasonNotBound       = "NotBound"
	// ReasonDiskWiped (an Event): an instance's disk was destroyed, with the
	// evidence.
	ReasonDiskWiped = "DiskWiped"
	// ImagesReady's reasons.
	ReasonImagesPulled  = "ImagesPulled"
	ReasonImagesPulling = "ImagesPulling"
	ReasonImagesFailed  = "ImagesFailed"
	ReasonNoImages      = "NoImages"
	// ChassisAvailable's reasons.
	ReasonAvailable          = "Available"
	ReasonChassisQuarantined = "ChassisQuarantined"
	ReasonChassisRebooting   = "ChassisRebooting"
	// ReasonChassisNeedsAttention: the chassis stuck too often; it stays
	// with the lease, fenced, until a person acts.
	ReasonChassisNeedsAttention = "ChassisNeedsAttention"
	// ReasonChassisRecovered (an Event): the chassis came back.
	ReasonChassisRecovered = "ChassisRecovered"
	// Recorded's reasons. ReasonStatusWriteRefused (also an Event): a
	// policy refused the operator's own status write, a bug.
	ReasonStatusWriteRefused = "StatusWriteRefused"
	ReasonRecorded           = "Recorded"
)
