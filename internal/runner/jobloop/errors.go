package jobloop

import "errors"

// Sentinel errors. Callers match them with errors.Is.
var (
	// ErrInvalidConfig means a Config that cannot work: no URL, no token,
	// no system id, or no executor.
	ErrInvalidConfig = errors.New("invalid job loop configuration")
	// ErrRunnerForbidden means GitLab answered 403 to the runner token:
	// it is revoked or wrong. The loop took no job and polling again
	// cannot help.
	ErrRunnerForbidden = errors.New("GitLab refused the runner token: revoked or wrong")
	// ErrNoJob means no job came within Config.WaitTimeout.
	ErrNoJob = errors.New("no job arrived before the wait timeout")
	// ErrSystemShutdown is the cancel cause to give RunOne's context
	// (context.WithCancelCause) when the VM is being stopped under the
	// job because its host failed, such as a quarantine. The job is
	// reported runner_system_failure, as is any cancellation whose cause
	// does not wrap ErrInterrupted: one the loop cannot attribute is the
	// system's.
	ErrSystemShutdown = errors.New("system shutdown")
	// ErrInterrupted is the cancel cause to give RunOne's context when a
	// healthy runner is told to stop under the job: a deleted or scaled
	// down GitLabRunner, a drained host. gitlab-runner 19.1+ reports a job
	// it is stopped under by SIGTERM runner_interrupted (common/build.go,
	// SystemInterrupt), not runner_system_failure, as the runner is not
	// broken; the loop does the same, and sends unknown_failure instead
	// to a GitLab whose features.failure_reasons does not list it.
	ErrInterrupted = errors.New("runner interrupted")
	// ErrJobCanceled means GitLab no longer lets the runner work on the
	// job: a user cancelled it, or GitLab failed it, or its token stopped
	// working. The loop stopped the job's script.
	ErrJobCanceled = errors.New("job canceled in GitLab")
	// ErrFinalUpdate means GitLab did not take the job's final state in
	// Config.FinalUpdateRetries tries, or within Config.FinalUpdateTimeout
	// once the loop was stopped; GitLab will time the job out itself.
	ErrFinalUpdate = errors.New("GitLab did not take the job's final state")
	// ErrProcess means gitlab-runner could not be started or ended with
	// an error before taking a job.
	ErrProcess = errors.New("gitlab-runner failed")
	// ErrNoResult means gitlab-runner exited after taking a job without
	// logging how the job ended.
	ErrNoResult = errors.New("gitlab-runner did not say how the job ended")
)
