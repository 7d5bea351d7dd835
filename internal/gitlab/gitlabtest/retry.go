package gitlabtest

import (
	"fmt"
	"slices"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// Retry is a job's retry: keyword, as GitLab's FullRetry entry takes it
// (lib/gitlab/ci/config/entry/retry.rb): max 0 to 2, when a list of
// failure reasons or "always", exit_codes a list of exit codes.
type Retry struct {
	// Max is how many times the job may be retried, at most 2. Zero means
	// no retry: key, so only GitLab's own defaults apply (scheduler_failure
	// is retried twice).
	Max int
	// When lists the failure reasons to retry on. Empty means ["always"],
	// unless ExitCodes is set: then only those exit codes are retried.
	When []string
	// ExitCodes lists script exit codes to retry on, whatever the reason.
	ExitCodes []int
}

// RetryWhenValues are the values retry:when accepts: GitLab's
// Gitlab::Ci::Status::Build::Failed.reasons keys and "always".
var RetryWhenValues = []string{
	"always",
	string(gitlab.FailureUnknown),
	string(gitlab.FailureScript),
	string(gitlab.FailureAPI),
	string(gitlab.FailureStuckOrTimeout),
	string(gitlab.FailureRunnerSystem),
	string(gitlab.FailureRunnerUnsupported),
	string(gitlab.FailureStaleSchedule),
	string(gitlab.FailureJobExecutionTimeout),
	string(gitlab.FailureArchived),
	string(gitlab.FailureUnmetPrerequisites),
	string(gitlab.FailureScheduler),
	string(gitlab.FailureDataIntegrity),
}

// validate refuses what GitLab refuses when it reads the pipeline's YAML.
func (r Retry) validate() error {
	if r.Max < 0 || r.Max > 2 {
		return fmt.Errorf("retry max %d: GitLab allows 0 to 2", r.Max)
	}
	for _, w := range r.When {
		if !slices.Contains(RetryWhenValues, w) {
			return fmt.Errorf("retry when %q: not a failure reason GitLab knows", w)
		}
	}
	return nil
}

// retryOverrides are failure reasons GitLab never retries, whatever the
// job says (lib/gitlab/ci/build/auto_retry.rb RETRY_OVERRIDES).
var retryOverrides = map[gitlab.FailureReason]int{
	gitlab.FailureCIQuotaExceeded:     0,
	gitlab.FailureNoMatchingRunner:    0,
	gitlab.FailureMissingDependency:   0,
	gitlab.FailureForwardDeployment:   0,
	gitlab.FailureEnvironmentCreation: 0,
}

// defaultRetries are GitLab's retries for a job without retry:max
// (auto_retry.rb DEFAULT_RETRIES).
var defaultRetries = map[gitlab.FailureReason]int{
	gitlab.FailureScheduler: 2,
}

// autoRetryAllowed is GitLab's Gitlab::Ci::Build::AutoRetry#allowed? for a
// job that has just failed (only a transition to failed triggers it, never
// a cancel): the allowed number of retries is the override for the reason,
// else max when the reason (or "always") is in when or the exit code is in
// exit_codes, else GitLab's default for the reason, else 0; the job is
// retried while fewer retries than that were made. when defaults to
// ["always"] only without exit_codes, as GitLab's spec/lib/gitlab/ci/build/
// auto_retry_spec.rb table has it ("not matching exit code" is false).
// exitCode 0 means the runner sent none, as exit_code 0 is never sent.
func autoRetryAllowed(r Retry, reason gitlab.FailureReason, exitCode, retries int) bool {
	allowed := maxAllowedRetries(r, reason, exitCode)
	return allowed > 0 && allowed > retries
}

func maxAllowedRetries(r Retry, reason gitlab.FailureReason, exitCode int) int {
	if n, ok := retryOverrides[reason]; ok {
		return n
	}
	if r.Max > 0 && (retryOnReasonOrAlways(r, reason) || retryOnExitCode(r, exitCode)) {
		return r.Max
	}
	return defaultRetries[reason]
}

func retryOnReasonOrAlways(r Retry, reason gitlab.FailureReason) bool {
	when := r.When
	if len(when) == 0 && len(r.ExitCodes) == 0 {
		when = []string{"always"}
	}
	return slices.Contains(when, string(reason)) || slices.Contains(when, "always")
}

func retryOnExitCode(r Retry, exitCode int) bool {
	return exitCode != 0 && slices.Contains(r.ExitCodes, exitCode)
}
