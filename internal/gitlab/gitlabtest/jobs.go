package gitlabtest

import (
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// JobSpec is one job of a pipeline, as its .gitlab-ci.yml would say it.
type JobSpec struct {
	// Name is the job's name; "job" if empty.
	Name string
	// Stage is the job's stage; "test" if empty.
	Stage string
	// Tags are the tags a runner needs to pick the job.
	Tags []string
	// Script is the job's script: lines.
	Script []string
	// AfterScript, if set, becomes an after_script step that always runs.
	AfterScript []string
	// Variables are added to GitLab's predefined ones.
	Variables []gitlab.Variable
	// Timeout is the job's timeout; DefaultJobTimeout if zero. GitLab sends
	// it in runner_info.timeout, in whole seconds.
	Timeout time.Duration
	// Retry is the job's retry: keyword.
	Retry Retry
	// ProjectID is the job's project; 1 if zero.
	ProjectID int64
}

// job is one attempt of a build.
type job struct {
	id            int64
	buildID       int64
	attempt       int
	state         gitlab.JobState
	token         string
	runnerID      int64
	systemID      string
	failureReason gitlab.FailureReason
	exitCode      int
	trace         []byte
	checksumOK    bool
	retried       bool
	queuedAt      time.Time
	startedAt     time.Time
	finishedAt    time.Time
	// touchedAt is the job's updated_at as the reaper reads it: when it
	// was picked, or last took a trace patch or an update.
	touchedAt time.Time
}

// build is a job of the pipeline and its attempts.
type build struct {
	id   int64
	spec JobSpec
	jobs []int64
}

// EnqueueJob adds a pending job to the queue and returns its build id,
// which its retries share. It panics on a spec GitLab would refuse to
// create (a retry max over 2, an unknown retry:when): that is a mistake
// in the test.
func (s *Server) EnqueueJob(spec JobSpec) int64 {
	if err := spec.Retry.validate(); err != nil {
		panic("gitlabtest: EnqueueJob: " + err.Error())
	}
	if spec.Name == "" {
		spec.Name = "job"
	}
	if spec.Stage == "" {
		spec.Stage = "test"
	}
	if spec.Timeout <= 0 {
		spec.Timeout = DefaultJobTimeout
	}
	if spec.ProjectID == 0 {
		spec.ProjectID = 1
	}
	spec.Tags = slices.Clone(spec.Tags)
	spec.Script = slices.Clone(spec.Script)
	spec.AfterScript = slices.Clone(spec.AfterScript)
	spec.Variables = slices.Clone(spec.Variables)
	spec.Retry.When = slices.Clone(spec.Retry.When)
	spec.Retry.ExitCodes = slices.Clone(spec.Retry.ExitCodes)

	s.mu.Lock()
	defer s.mu.Unlock()
	b := &build{id: s.nextBuildID, spec: spec}
	s.nextBuildID++
	s.builds[b.id] = b
	s.buildOrder = append(s.buildOrder, b.id)
	s.enqueueAttempt(b, 1)
	return b.id
}

// enqueueAttempt queues a new job for build b. Callers hold mu.
func (s *Server) enqueueAttempt(b *build, attempt int) *job {
	j := &job{
		id:       s.nextJobID,
		buildID:  b.id,
		attempt:  attempt,
		state:    gitlab.StatePending,
		queuedAt: s.clk.Now(),
	}
	s.nextJobID++
	s.jobs[j.id] = j
	s.jobOrder = append(s.jobOrder, j.id)
	b.jobs = append(b.jobs, j.id)
	s.queueVersion++
	return j
}

// CancelJob cancels a pending or running job, as a user pressing Cancel
// does; the runner learns it from the next trace patch or update (403 with
// Job-Status: canceled). A canceled job is never retried automatically.
// It reports whether the job was pending or running.
func (s *Server) CancelJob(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok || (j.state != gitlab.StatePending && j.state != gitlab.StateRunning) {
		return false
	}
	j.state = gitlab.StateCanceled
	j.finishedAt = s.clk.Now()
	s.queueVersion++
	return true
}

// Job is a snapshot of one job (one attempt of a build).
type Job struct {
	ID      int64
	BuildID int64
	Name    string
	// Attempt is 1 for the first job of a build, 2 for its first retry.
	Attempt       int
	State         gitlab.JobState
	FailureReason gitlab.FailureReason
	ExitCode      int
	Trace         string
	// RunnerID and SystemID say which runner and manager took the job.
	RunnerID int64
	SystemID string
	// TraceChecksumOK says the final update's output.checksum and
	// bytesize matched the trace GitLab holds.
	TraceChecksumOK bool
	// Retried says GitLab retried this job as a newer one.
	Retried    bool
	QueuedAt   time.Time
	StartedAt  time.Time
	FinishedAt time.Time
}

// snapshot copies j. Callers hold mu.
func (s *Server) snapshot(j *job) Job {
	return Job{
		ID:              j.id,
		BuildID:         j.buildID,
		Name:            s.builds[j.buildID].spec.Name,
		Attempt:         j.attempt,
		State:           j.state,
		FailureReason:   j.failureReason,
		ExitCode:        j.exitCode,
		Trace:           string(j.trace),
		RunnerID:        j.runnerID,
		SystemID:        j.systemID,
		TraceChecksumOK: j.checksumOK,
		Retried:         j.retried,
		QueuedAt:        j.queuedAt,
		StartedAt:       j.startedAt,
		FinishedAt:      j.finishedAt,
	}
}

// Jobs returns every job, oldest first.
func (s *Server) Jobs() []Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reap()
	out := make([]Job, 0, len(s.jobOrder))
	for _, id := range s.jobOrder {
		out = append(out, s.snapshot(s.jobs[id]))
	}
	return out
}

// Job returns one job.
func (s *Server) Job(id int64) (Job, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reap()
	j, ok := s.jobs[id]
	if !ok {
		return Job{}, false
	}
	return s.snapshot(j), true
}

// Build summarises a build: its attempts and the state of the latest.
type Build struct {
	ID     int64
	Name   string
	JobIDs []int64
	// State, FailureReason and ExitCode are the latest attempt's: the
	// build's final result once that is success, failed or canceled.
	State         gitlab.JobState
	FailureReason gitlab.FailureReason
	ExitCode      int
}

// Attempts is how many jobs the build has had.
func (b Build) Attempts() int { return len(b.JobIDs) }

// Builds returns every build, oldest first.
func (s *Server) Builds() []Build {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reap()
	out := make([]Build, 0, len(s.buildOrder))
	for _, id := range s.buildOrder {
		b := s.builds[id]
		last := s.jobs[b.jobs[len(b.jobs)-1]]
		out = append(out, Build{
			ID:            b.id,
			Name:          b.spec.Name,
			JobIDs:        slices.Clone(b.jobs),
			State:         last.state,
			FailureReason: last.failureReason,
			ExitCode:      last.exitCode,
		})
	}
	return out
}

// pick hands the oldest pending job runner r may take to r, or nil.
// Callers hold mu.
func (s *Server) pick(r *runner, systemID string) *job {
	for _, id := range s.jobOrder {
		j := s.jobs[id]
		if j.state != gitlab.StatePending || !matches(r, s.builds[j.buildID].spec.Tags) {
			continue
		}
		j.state = gitlab.StateRunning
		j.token = newJobToken()
		j.runnerID = r.id
		j.systemID = systemID
		j.startedAt = s.clk.Now()
		j.touchedAt = j.startedAt
		s.queueVersion++
		return j
	}
	return nil
}

// matches is GitLab's tag rule: a runner picks a job whose tags it all
// has, and an untagged job only if it runs untagged jobs.
func matches(r *runner, tags []string) bool {
	if len(tags) == 0 {
		return r.runUntagged
	}
	for _, t := range tags {
		if !slices.Contains(r.tags, t) {
			return false
		}
	}
	return true
}

// payload is the JobResponse GitLab would send for j, with the server's
// URL and the job's fresh token. Callers hold mu.
func (s *Server) payload(j *job) gitlab.JobResponse {
	spec := s.builds[j.buildID].spec
	timeout := int(spec.Timeout / time.Second)
	host := s.srv.Listener.Addr().String()
	vars := []gitlab.Variable{
		{Key: "CI_JOB_ID", Value: strconv.FormatInt(j.id, 10), Public: true},
		{Key: "CI_JOB_NAME", Value: spec.Name, Public: true},
		{Key: "CI_JOB_STAGE", Value: spec.Stage, Public: true},
		{Key: "CI_JOB_TOKEN", Value: j.token, Masked: true},
		{Key: "CI_PIPELINE_ID", Value: strconv.FormatInt(j.buildID, 10), Public: true},
		{Key: "CI_PROJECT_ID", Value: strconv.FormatInt(spec.ProjectID, 10), Public: true},
		{Key: "CI_SERVER_URL", Value: s.URL(), Public: true},
	}
	vars = append(vars, spec.Variables...)
	steps := []gitlab.Step{{
		Name: gitlab.StepScript, Script: spec.Script, Timeout: timeout, When: gitlab.WhenOnSuccess,
	}}
	if len(spec.AfterScript) > 0 {
		steps = append(steps, gitlab.Step{
			Name: gitlab.StepAfterScript, Script: spec.AfterScript, Timeout: 300, When: gitlab.WhenAlways, AllowFailure: true,
		})
	}
	reasons := make([]gitlab.FailureReason, 0, len(RetryWhenValues))
	for _, w := range RetryWhenValues[1:] {
		reasons = append(reasons, gitlab.FailureReason(w))
	}
	return gitlab.JobResponse{
		ID:            j.id,
		Token:         j.token,
		AllowGitFetch: true,
		JobInfo: gitlab.JobInfo{
			Name:               spec.Name,
			Stage:              spec.Stage,
			PipelineID:         j.buildID,
			ProjectID:          spec.ProjectID,
			ProjectName:        "project",
			ProjectFullPath:    "group/project",
			TimeInQueueSeconds: s.clk.Since(j.queuedAt).Seconds(),
		},
		GitInfo: gitlab.GitInfo{
			// GitLab puts the job token in the clone URL (Ci::Build#repo_url).
			RepoURL: fmt.Sprintf("https://gitlab-ci-token:%s@%s/group/project.git", j.token, host),
			Ref:     "main",
			Sha:     "0123456789abcdef0123456789abcdef01234567",
			RefType: "branch",
			Depth:   20,
		},
		RunnerInfo: gitlab.JobRunnerInfo{Timeout: timeout},
		Variables:  vars,
		Steps:      steps,
		Features:   gitlab.GitlabFeatures{TraceSections: true, FailureReasons: reasons},
	}
}

// finish moves a running job to its final state and applies GitLab's
// auto-retry to a failure. Callers hold mu.
func (s *Server) finish(j *job, state gitlab.JobState, reason gitlab.FailureReason, exitCode int, out gitlab.JobTraceOutput) {
	j.state = state
	j.finishedAt = s.clk.Now()
	j.exitCode = exitCode
	j.checksumOK = out.Bytesize == len(j.trace) && out.Checksum == traceChecksum(j.trace)
	if state != gitlab.StateFailed {
		return
	}
	j.failureReason = normaliseReason(reason)
	b := s.builds[j.buildID]
	if autoRetryAllowed(b.spec.Retry, j.failureReason, exitCode, j.attempt-1) {
		j.retried = true
		s.enqueueAttempt(b, j.attempt+1)
	}
}

// reap is GitLab's stuck-jobs worker: it fails each running job untouched
// for staleAfter as stuck_or_timeout_failure, which GitLab's auto-retry
// may then retry. GitLab runs it on a schedule; the fake runs it on every
// request and accessor, so a test sees the rule at the clock's time.
// Callers hold mu.
func (s *Server) reap() {
	if s.staleAfter <= 0 {
		return
	}
	now := s.clk.Now()
	for _, id := range s.jobOrder {
		if j := s.jobs[id]; j.state == gitlab.StateRunning && now.Sub(j.touchedAt) >= s.staleAfter {
			s.finish(j, gitlab.StateFailed, gitlab.FailureStuckOrTimeout, 0, gitlab.JobTraceOutput{})
		}
	}
}

// knownReasons are the failure reasons GitLab stores (Enums::Ci::
// CommitStatus.failure_reasons); any other becomes unknown_failure, as
// UpdateBuildStateService maps it.
var knownReasons = []gitlab.FailureReason{
	gitlab.FailureUnknown, gitlab.FailureScript, gitlab.FailureAPI, gitlab.FailureStuckOrTimeout,
	gitlab.FailureRunnerSystem, gitlab.FailureMissingDependency, gitlab.FailureRunnerUnsupported,
	gitlab.FailureStaleSchedule, gitlab.FailureJobExecutionTimeout, gitlab.FailureArchived,
	gitlab.FailureUnmetPrerequisites, gitlab.FailureScheduler, gitlab.FailureDataIntegrity,
	gitlab.FailureForwardDeployment, gitlab.FailureUserBlocked, gitlab.FailureProjectDeleted,
	gitlab.FailureCIQuotaExceeded, gitlab.FailurePipelineLoopDetected, gitlab.FailureNoMatchingRunner,
	gitlab.FailureTraceSizeExceeded, gitlab.FailureBuildsDisabled, gitlab.FailureEnvironmentCreation,
}

func normaliseReason(r gitlab.FailureReason) gitlab.FailureReason {
	if slices.Contains(knownReasons, r) {
		return r
	}
	return gitlab.FailureUnknown
}

// traceChecksum is the checksum a runner sends for a trace.
func traceChecksum(b []byte) string {
	return fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(b))
}
