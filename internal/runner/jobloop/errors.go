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
	// job: a quarantine, a deleted GitLabRunner. Any cancellation of a
	// running job is reported runner_system_failure; this cause only
	// makes the trace say why.
	ErrSystemShutdown = errors.New("system shutdown")
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
