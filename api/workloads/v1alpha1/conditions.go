package v1alpha1

// Condition types of a GitLabRunner.
const (
	// ConditionRegistered: GitLab accepted the runner authentication token.
	ConditionRegistered = "Registered"
	// ConditionReady: the warm pool is full: concurrency VMs booted, idle
	// or running a job.
	ConditionReady = "Ready"
	// ConditionDegraded: something keeps the runner below its concurrency
	// for a reason that is not a job's: the chassis is quarantined, VMs
	// fail to start, the lease is not Bound.
	ConditionDegraded = "Degraded"
)

// Reasons used on GitLabRunner conditions and Events.
const (
	ReasonVerified           = "Verified"
	ReasonTokenRejected      = "TokenRejected"
	ReasonTokenSecretMissing = "TokenSecretMissing"
	ReasonIdentityMissing    = "IdentityMissing"
	ReasonGitLabUnreachable  = "GitLabUnreachable"
	ReasonPoolFull           = "PoolFull"
	ReasonPoolFilling        = "PoolFilling"
	ReasonLeaseNotBound      = "LeaseNotBound"
	ReasonChassisUnavailable = "ChassisUnavailable"
	ReasonGuestConfigInvalid = "GuestConfigInvalid"
	ReasonGuestKeyMissing    = "GuestKeyMissing"
	ReasonInstanceRefused    = "InstanceRefused"
	ReasonVMFailed           = "VMFailed"
	ReasonAsExpected         = "AsExpected"
	ReasonDeleting           = "Deleting"
	ReasonHostNotAllowed     = "HostNotAllowed"
	// Events.
	ReasonJobFinished         = "JobFinished"
	ReasonVMCreated           = "VMCreated"
	ReasonJobTimedOut         = "JobTimedOut"
	ReasonManagerUnregistered = "ManagerUnregistered"
	ReasonUnregisterFailed    = "UnregisterFailed"
)

// Names the GitLabRunner controller uses on the objects it touches.
const (
	// RunnerServiceAccount is the ServiceAccount, in the runner's
	// namespace, that the controller acts as. The tenant creates it and
	// grants it what a runner needs (config/rbac's macrack-gitlab-runner
	// ClusterRole, bound in the namespace, and get on the token Secret).
	// The operator may impersonate this name only.
	RunnerServiceAccount = "macrack-gitlab-runner"
	// RunnerFinalizer holds a deleted runner until its VMs are gone and
	// its managers unregistered.
	RunnerFinalizer = "workloads.macrack.io/gitlab-runner"
	// RunnerLabel, on an instance, names the GitLabRunner it serves;
	// SlotLabel its pool slot.
	RunnerLabel = "workloads.macrack.io/gitlab-runner"
	SlotLabel   = "workloads.macrack.io/slot"
	// GenerationLabel numbers the VMs of one slot.
	GenerationLabel = "workloads.macrack.io/generation"
)

// Bounds of a runner.
const (
	// MaxConcurrency is the kernel's two VMs per chassis.
	MaxConcurrency = 2
	// MaxJobHistory is how many finished jobs status.jobs keeps.
	MaxJobHistory = 20
	// MaxNameLength keeps a runner's VM names DNS labels.
	MaxNameLength = 48
)
