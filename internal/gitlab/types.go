package gitlab

import (
	"encoding/json"
	"fmt"
	"time"
)

// The wire types below are gitlab-runner's, field for field where this
// package uses them: the request types from common/network.go, the job
// from common/spec/spec.go (spec.Job and the types it holds). Fields that
// a one-job runner never reads or sends are left out; unknown fields in
// GitLab's answers are ignored, as gitlab-runner ignores them.

// JobState is a job's state as the runner reports it (common/network.go),
// and, for the Job-Status header, as GitLab reports it
// (network/remote_job_state_response.go).
type JobState string

// Job states.
const (
	StatePending   JobState = "pending"
	StateRunning   JobState = "running"
	StateSuccess   JobState = "success"
	StateFailed    JobState = "failed"
	StateCanceling JobState = "canceling"
	StateCanceled  JobState = "canceled"
)

// FailureReason is a job's failure_reason (common/network.go for the ones
// a runner sends; GitLab's Enums::Ci::CommitStatus and the retry:when
// values of lib/gitlab/ci/config/entry/retry.rb for the rest).
type FailureReason string

// Failure reasons. A runner sends only the first three; the others are
// GitLab's own, listed because retry:when may name them.
const (
	FailureScript              FailureReason = "script_failure"
	FailureRunnerSystem        FailureReason = "runner_system_failure"
	FailureJobExecutionTimeout FailureReason = "job_execution_timeout"
	// FailureRunnerInterrupted is gitlab-runner 19.1+'s reason for a job
	// stopped because the runner was told to stop (SIGTERM). A runner
	// sends it only where the job's features.failure_reasons lists it,
	// else unknown_failure.
	FailureRunnerInterrupted FailureReason = "runner_interrupted"

	FailureUnknown              FailureReason = "unknown_failure"
	FailureAPI                  FailureReason = "api_failure"
	FailureStuckOrTimeout       FailureReason = "stuck_or_timeout_failure"
	FailureRunnerUnsupported    FailureReason = "runner_unsupported"
	FailureStaleSchedule        FailureReason = "stale_schedule"
	FailureArchived             FailureReason = "archived_failure"
	FailureUnmetPrerequisites   FailureReason = "unmet_prerequisites"
	FailureScheduler            FailureReason = "scheduler_failure"
	FailureDataIntegrity        FailureReason = "data_integrity_failure"
	FailureMissingDependency    FailureReason = "missing_dependency_failure"
	FailureForwardDeployment    FailureReason = "forward_deployment_failure"
	FailureCIQuotaExceeded      FailureReason = "ci_quota_exceeded"
	FailureNoMatchingRunner     FailureReason = "no_matching_runner"
	FailureTraceSizeExceeded    FailureReason = "trace_size_exceeded"
	FailureEnvironmentCreation  FailureReason = "environment_creation_failure"
	FailureUserBlocked          FailureReason = "user_blocked"
	FailureProjectDeleted       FailureReason = "project_deleted"
	FailurePipelineLoopDetected FailureReason = "pipeline_loop_detected"
	FailureBuildsDisabled       FailureReason = "builds_disabled"
)

// FeaturesInfo is what the runner tells GitLab it supports
// (common/network.go). GitLab refuses a job needing a feature the runner
// lacks, with runner_unsupported.
type FeaturesInfo struct {
	Variables               bool `json:"variables"`
	Image                   bool `json:"image"`
	Services                bool `json:"services"`
	Artifacts               bool `json:"artifacts"`
	Cache                   bool `json:"cache"`
	FallbackCacheKeys       bool `json:"fallback_cache_keys"`
	Shared                  bool `json:"shared"`
	UploadMultipleArtifacts bool `json:"upload_multiple_artifacts"`
	UploadRawArtifacts      bool `json:"upload_raw_artifacts"`
	Session                 bool `json:"session"`
	Terminal                bool `json:"terminal"`
	Refspecs                bool `json:"refspecs"`
	Masking                 bool `json:"masking"`
	Proxy                   bool `json:"proxy"`
	RawVariables            bool `json:"raw_variables"`
	ArtifactsExclude        bool `json:"artifacts_exclude"`
	MultiBuildSteps         bool `json:"multi_build_steps"`
	TraceReset              bool `json:"trace_reset"`
	TraceChecksum           bool `json:"trace_checksum"`
	TraceSize               bool `json:"trace_size"`
	VaultSecrets            bool `json:"vault_secrets"`
	Cancelable              bool `json:"cancelable"`
	ReturnExitCode          bool `json:"return_exit_code"`
	ServiceVariables        bool `json:"service_variables"`
	ServiceMultipleAliases  bool `json:"service_multiple_aliases"`
	ImageExecutorOpts       bool `json:"image_executor_opts"`
	ServiceExecutorOpts     bool `json:"service_executor_opts"`
	CancelGracefully        bool `json:"cancel_gracefully"`
	NativeStepsIntegration  bool `json:"native_steps_integration"`
	TwoPhaseJobCommit       bool `json:"two_phase_job_commit"`
	JobInputs               bool `json:"job_inputs"`
}

// ConfigInfo is common/network.go's ConfigInfo.
type ConfigInfo struct {
	Gpus string `json:"gpus"`
}

// RunnerInfo is the runner's metadata sent with every request
// (gitlab-runner's common.Info, the "info" object).
type RunnerInfo struct {
	Name         string            `json:"name,omitempty"`
	Version      string            `json:"version,omitempty"`
	Revision     string            `json:"revision,omitempty"`
	Platform     string            `json:"platform,omitempty"`
	Architecture string            `json:"architecture,omitempty"`
	Executor     string            `json:"executor,omitempty"`
	Shell        string            `json:"shell,omitempty"`
	Features     FeaturesInfo      `json:"features"`
	Config       ConfigInfo        `json:"config"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// VerifyRunnerRequest is the body of POST /runners/verify (common/network.go).
type VerifyRunnerRequest struct {
	Info     RunnerInfo `json:"info"`
	Token    string     `json:"token,omitempty"`
	SystemID string     `json:"system_id,omitempty"`
}

// VerifyRunnerResponse is its answer (common/network.go; GitLab's
// Entities::Ci::RunnerRegistrationDetails). token_expires_at is null for a
// token that does not expire.
type VerifyRunnerResponse struct {
	ID             int64     `json:"id,omitempty"`
	Token          string    `json:"token,omitempty"`
	TokenExpiresAt time.Time `json:"token_expires_at"`
}

// UnregisterRunnerManagerRequest is the body of DELETE /runners/managers
// (common/network.go).
type UnregisterRunnerManagerRequest struct {
	Token    string `json:"token,omitempty"`
	SystemID string `json:"system_id"`
}

// JobRequest is the body of POST /jobs/request (common/network.go).
// LastUpdate echoes the X-GitLab-Last-Update of the previous answer, so
// that GitLab answers 204 at once when the runner's queue has not changed.
type JobRequest struct {
	Info       RunnerInfo `json:"info"`
	Token      string     `json:"token,omitempty"`
	SystemID   string     `json:"system_id,omitempty"`
	LastUpdate string     `json:"last_update,omitempty"`
}

// UpdateJobRequest is the body of PUT /jobs/:id (common/network.go).
// Checksum repeats Output.Checksum for older GitLabs. exit_code is
// omitted when 0, as gitlab-runner omits it.
type UpdateJobRequest struct {
	Info          RunnerInfo     `json:"info"`
	Token         string         `json:"token,omitempty"`
	State         JobState       `json:"state,omitempty"`
	FailureReason FailureReason  `json:"failure_reason,omitempty"`
	Checksum      string         `json:"checksum,omitempty"`
	Output        JobTraceOutput `json:"output"`
	ExitCode      int            `json:"exit_code,omitempty"`
}

// JobTraceOutput describes the whole trace sent so far: its CRC32
// ("crc32:%08x", IEEE, as helpers/trace/buffer.go writes it) and size.
type JobTraceOutput struct {
	Checksum string `json:"checksum,omitempty"`
	Bytesize int    `json:"bytesize,omitempty"`
}

// JobResponse is the job GitLab hands out on a 201 (spec.Job in
// common/spec/spec.go). It holds secrets (Token, the job token inside
// GitInfo.RepoURL, masked variables, credentials and dependency tokens),
// so its String and MarshalLog show only the id and name.
type JobResponse struct {
	ID            int64          `json:"id"`
	Token         string         `json:"token"`
	AllowGitFetch bool           `json:"allow_git_fetch"`
	JobInfo       JobInfo        `json:"job_info"`
	GitInfo       GitInfo        `json:"git_info"`
	RunnerInfo    JobRunnerInfo  `json:"runner_info"`
	Variables     []Variable     `json:"variables"`
	Steps         []Step         `json:"steps"`
	Image         Image          `json:"image"`
	Services      []Image        `json:"services"`
	Artifacts     []Artifact     `json:"artifacts"`
	Cache         []Cache        `json:"cache"`
	Credentials   []Credentials  `json:"credentials"`
	Dependencies  []Dependency   `json:"dependencies"`
	Features      GitlabFeatures `json:"features"`
}

// String names the job without any of its secrets. Its receiver is a
// value so that a JobResponse printed by value hides them too.
func (j JobResponse) String() string {
	return fmt.Sprintf("job %d (%s)", j.ID, j.JobInfo.Name)
}

// GoString is String, so that %#v does not print the token either.
func (j JobResponse) GoString() string { return j.String() }

// MarshalLog is what logr prints for a job: its id and name only.
func (j JobResponse) MarshalLog() any {
	return struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}{j.ID, j.JobInfo.Name}
}

// JobInfo is spec.JobInfo.
type JobInfo struct {
	Name               string  `json:"name"`
	Stage              string  `json:"stage"`
	PipelineID         int64   `json:"pipeline_id"`
	ProjectID          int64   `json:"project_id"`
	ProjectName        string  `json:"project_name"`
	ProjectFullPath    string  `json:"project_full_path"`
	NamespaceID        int64   `json:"namespace_id"`
	RootNamespaceID    int64   `json:"root_namespace_id"`
	UserID             int64   `json:"user_id"`
	TimeInQueueSeconds float64 `json:"time_in_queue_seconds"`
	QueueSize          int64   `json:"queue_size"`
	QueueDepth         int64   `json:"queue_depth"`
}

// GitInfo is spec.GitInfo. RepoURL carries the job token as its password.
type GitInfo struct {
	RepoURL   string   `json:"repo_url"`
	Ref       string   `json:"ref"`
	Sha       string   `json:"sha"`
	BeforeSha string   `json:"before_sha"`
	RefType   string   `json:"ref_type"`
	Refspecs  []string `json:"refspecs"`
	Depth     int      `json:"depth"`
}

// JobRunnerInfo is spec.RunnerInfo, the job's "runner_info": Timeout is
// the job's timeout in seconds, already bounded by the runner's maximum.
type JobRunnerInfo struct {
	Timeout int `json:"timeout"`
}

// Variable is spec.Variable.
type Variable struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Public bool   `json:"public"`
	File   bool   `json:"file"`
	Masked bool   `json:"masked"`
	Raw    bool   `json:"raw"`
}

// String shows a masked or non-public variable's key only.
func (v Variable) String() string {
	if v.Masked || !v.Public {
		return v.Key + "=[MASKED]"
	}
	return v.Key + "=" + v.Value
}

// StepName is spec.StepName.
type StepName string

// Step names GitLab sends.
const (
	StepScript      StepName = "script"
	StepAfterScript StepName = "after_script"
	StepRelease     StepName = "release"
)

// StepWhen is spec.StepWhen: when a step runs, given how the job went.
type StepWhen string

// Step conditions. The empty value means on_success.
const (
	WhenOnSuccess StepWhen = "on_success"
	WhenOnFailure StepWhen = "on_failure"
	WhenAlways    StepWhen = "always"
)

// OnSuccess says whether the step runs after the steps before it passed.
func (w StepWhen) OnSuccess() bool { return w == "" || w == WhenOnSuccess || w == WhenAlways }

// OnFailure says whether the step runs after a step before it failed.
func (w StepWhen) OnFailure() bool { return w == WhenOnFailure || w == WhenAlways }

// Step is spec.Step: Timeout is in seconds.
type Step struct {
	Name         StepName `json:"name"`
	Script       []string `json:"script"`
	Timeout      int      `json:"timeout"`
	When         StepWhen `json:"when"`
	AllowFailure bool     `json:"allow_failure"`
}

// Image is spec.Image. ExecutorOptions is kept raw: this runner has no
// image executor to give it to.
type Image struct {
	Name            string          `json:"name"`
	Alias           string          `json:"alias,omitempty"`
	Command         []string        `json:"command,omitempty"`
	Entrypoint      []string        `json:"entrypoint,omitempty"`
	Ports           []Port          `json:"ports,omitempty"`
	Variables       []Variable      `json:"variables,omitempty"`
	PullPolicies    []string        `json:"pull_policy,omitempty"`
	ExecutorOptions json.RawMessage `json:"executor_opts,omitempty"`
}

// Port is spec.Port.
type Port struct {
	Number   int    `json:"number,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Name     string `json:"name,omitempty"`
}

// Artifact is spec.Artifact.
type Artifact struct {
	Name      string   `json:"name"`
	Untracked bool     `json:"untracked"`
	Paths     []string `json:"paths"`
	Exclude   []string `json:"exclude"`
	When      string   `json:"when"`
	Type      string   `json:"artifact_type"`
	Format    string   `json:"artifact_format"`
	ExpireIn  string   `json:"expire_in"`
}

// Cache is spec.Cache.
type Cache struct {
	Key          string   `json:"key"`
	Untracked    bool     `json:"untracked"`
	Policy       string   `json:"policy"`
	Paths        []string `json:"paths"`
	When         string   `json:"when"`
	FallbackKeys []string `json:"fallback_keys"`
}

// Credentials is spec.Credentials, such as a registry login.
type Credentials struct {
	Type     string `json:"type"`
	URL      string `json:"url"`
	Username string `json:"username"`
	Password string `json:"password"`
}

// String leaves the password out.
func (c Credentials) String() string { return c.Type + " " + c.URL + " as " + c.Username }

// Dependency is spec.Dependency: a job whose artifacts this one downloads,
// with the token to download them.
type Dependency struct {
	ID            int64                   `json:"id"`
	Token         string                  `json:"token"`
	Name          string                  `json:"name"`
	ArtifactsFile DependencyArtifactsFile `json:"artifacts_file"`
}

// String leaves the token out.
func (d Dependency) String() string { return fmt.Sprintf("dependency %d (%s)", d.ID, d.Name) }

// DependencyArtifactsFile is spec.DependencyArtifactsFile.
type DependencyArtifactsFile struct {
	Filename string `json:"filename"`
	Size     int64  `json:"size"`
}

// GitlabFeatures is spec.GitlabFeatures: what GitLab supports, such as
// which failure reasons it knows.
type GitlabFeatures struct {
	TraceSections     bool            `json:"trace_sections"`
	TokenMaskPrefixes []string        `json:"token_mask_prefixes"`
	FailureReasons    []FailureReason `json:"failure_reasons"`
}
