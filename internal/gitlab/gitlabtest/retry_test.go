package gitlabtest

import (
	"testing"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// The cases follow GitLab's spec/lib/gitlab/ci/build/auto_retry_spec.rb
// table, plus the ones MacRack leans on.
func TestTheRetryRuleIsGitLabs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		retries  int
		retry    Retry
		reason   gitlab.FailureReason
		exitCode int
		want     bool
	}{
		{"retries are disabled without retry:max", 0, Retry{}, gitlab.FailureScript, 1, false},
		{"max equal to the retries made allows no more", 2, Retry{Max: 2}, gitlab.FailureScript, 1, false},
		{"max above the retries made allows one more", 1, Retry{Max: 2}, gitlab.FailureScript, 1, true},
		{"a matching failure reason is retried", 0, Retry{Max: 2, When: []string{"api_failure"}}, gitlab.FailureAPI, 0, true},
		{"always matches any reason", 0, Retry{Max: 2, When: []string{"always"}}, gitlab.FailureAPI, 0, true},
		{"a reason not listed is not retried", 0, Retry{Max: 2, When: []string{"script_failure"}}, gitlab.FailureAPI, 0, false},
		{"a runner system failure listed is retried", 0, Retry{Max: 1, When: []string{"runner_system_failure"}}, gitlab.FailureRunnerSystem, 0, true},
		{"a runner system failure is retried at most max times", 1, Retry{Max: 1, When: []string{"runner_system_failure"}}, gitlab.FailureRunnerSystem, 0, false},
		{"a script failure is not retried when only system failures are", 0, Retry{Max: 2, When: []string{"runner_system_failure"}}, gitlab.FailureScript, 1, false},
		{"a scheduler failure is retried twice by default", 1, Retry{}, gitlab.FailureScheduler, 0, true},
		{"a scheduler failure follows a configured max", 1, Retry{Max: 1, When: []string{"scheduler_failure"}}, gitlab.FailureScheduler, 0, false},
		{"a matching exit code is retried", 0, Retry{Max: 2, ExitCodes: []int{255, 137}}, gitlab.FailureScript, 137, true},
		{"an exit code not listed is not retried, when does not default to always", 0, Retry{Max: 2, ExitCodes: []int{255}}, gitlab.FailureScript, 1, false},
		{"an exit code matches whatever the reason", 0, Retry{Max: 2, ExitCodes: []int{3}, When: []string{"script_failure"}}, gitlab.FailureAPI, 3, true},
		{"a reason matches whatever the exit code", 0, Retry{Max: 2, ExitCodes: []int{1}, When: []string{"script_failure"}}, gitlab.FailureScript, 137, true},
		{"neither matching is not retried", 0, Retry{Max: 2, ExitCodes: []int{1}, When: []string{"script_failure"}}, gitlab.FailureAPI, 137, false},
		{"an exceeded quota is never retried", 0, Retry{Max: 2}, gitlab.FailureCIQuotaExceeded, 0, false},
		{"a missing dependency is never retried", 0, Retry{Max: 2}, gitlab.FailureMissingDependency, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := autoRetryAllowed(tc.retry, tc.reason, tc.exitCode, tc.retries); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRetryConfigIsCheckedAsGitLabChecksTheYAML(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry Retry
		ok    bool
	}{
		{"max 2 with a known reason is valid", Retry{Max: 2, When: []string{"runner_system_failure", "always"}}, true},
		{"max 3 is refused", Retry{Max: 3}, false},
		{"a negative max is refused", Retry{Max: -1}, false},
		{"an unknown reason is refused", Retry{Max: 1, When: []string{"cosmic_rays"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.retry.validate(); (err == nil) != tc.ok {
				t.Fatalf("got %v", err)
			}
		})
	}
}
