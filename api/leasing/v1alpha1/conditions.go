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
)
