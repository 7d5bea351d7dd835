package jobloop

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/gitlab/gitlabtest"
)

func TestAReasonGitLabDoesNotListIsSentAsUnknownFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listed []gitlab.FailureReason
		reason gitlab.FailureReason
		want   gitlab.FailureReason
	}{
		{"runner_interrupted goes as itself to a GitLab that lists it",
			[]gitlab.FailureReason{gitlab.FailureScript, gitlab.FailureRunnerInterrupted}, gitlab.FailureRunnerInterrupted, gitlab.FailureRunnerInterrupted},
		{"runner_interrupted goes as unknown_failure to a GitLab that does not",
			[]gitlab.FailureReason{gitlab.FailureScript, gitlab.FailureRunnerSystem}, gitlab.FailureRunnerInterrupted, gitlab.FailureUnknown},
		{"runner_system_failure goes to any GitLab, listed or not", nil, gitlab.FailureRunnerSystem, gitlab.FailureRunnerSystem},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := supportedReason(tc.listed, tc.reason); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestAnInterruptedJobIsRunnerInterruptedNotASystemFailure(t *testing.T) {
	e := newEnv(t)
	build := e.gl.EnqueueJob(gitlabtest.JobSpec{
		Script:  []string{"echo started", "sleep 1h", "echo finished"},
		Timeout: 2 * time.Hour,
		// This GitLab does not list runner_interrupted: the job arrives as
		// unknown_failure, which is what its retry must name.
		Retry: gitlabtest.Retry{Max: 1, When: []string{"runner_system_failure", "unknown_failure"}},
	})
	clk := clocktesting.NewFakeClock(epoch)
	ctx, abort := context.WithCancelCause(context.Background())
	out, states := e.start(ctx, SimExecutor{Clock: clk}, clk)
	e.awaitPhase(states, PhaseRunning)
	eventually(t, "the job sleeps", func() bool { return clk.Waiters() == 3 })
	abort(fmt.Errorf("GitLabRunner deleted: %w", ErrInterrupted))
	r := e.await(out)

	if !errors.Is(r.err, ErrInterrupted) {
		t.Fatalf("want the abort's cause, got %v", r.err)
	}
	if r.state.Phase != PhaseFailed || r.state.FailureReason != "runner_interrupted" || r.state.ExitCode != nil {
		t.Fatalf("state %+v", r.state)
	}
	first := e.job(build, 1)
	if first.State != gitlab.StateFailed || first.FailureReason != gitlab.FailureUnknown || !first.Retried {
		t.Fatalf("GitLab has %+v", first)
	}
	if !strings.HasSuffix(first.Trace, "ERROR: Job failed: aborted: GitLabRunner deleted: runner interrupted\n") {
		t.Fatalf("trace:\n%s", first.Trace)
	}
}
