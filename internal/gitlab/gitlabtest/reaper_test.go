package gitlabtest_test

import (
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/gitlab/gitlabtest"
)

func TestTheReaperFailsARunningJobUntouchedForAnHour(t *testing.T) {
	for _, tc := range []struct {
		name  string
		touch func(t *testing.T, c *gitlab.Client, j *gitlab.JobResponse)
	}{
		{"a trace patch touches the job", func(t *testing.T, c *gitlab.Client, j *gitlab.JobResponse) {
			if _, err := c.PatchTrace(ctx(t), j.ID, j.Token, []byte("x"), 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"a running update (a keep-alive) touches the job", func(t *testing.T, c *gitlab.Client, j *gitlab.JobResponse) {
			if _, err := c.UpdateJob(ctx(t), j.ID, j.Token, gitlab.JobUpdate{State: gitlab.StateRunning}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			s := gitlabtest.NewServer(t, gitlabtest.WithClock(clk))
			s.AddRunnerToken(token)
			build := s.EnqueueJob(gitlabtest.JobSpec{Retry: gitlabtest.Retry{Max: 1, When: []string{"stuck_or_timeout_failure"}}})
			c := newClient(t, s)
			j := take(t, c, token, "s")

			// Touched just before the hour, the job lives another hour.
			clk.SetTime(clk.Now().Add(gitlabtest.StaleJobTimeout - time.Second))
			tc.touch(t, c, j)
			clk.SetTime(clk.Now().Add(gitlabtest.StaleJobTimeout - time.Second))
			if got, _ := s.Job(j.ID); got.State != gitlab.StateRunning {
				t.Fatalf("a touched job was reaped: %+v", got)
			}

			clk.SetTime(clk.Now().Add(time.Second))
			got, _ := s.Job(j.ID)
			if got.State != gitlab.StateFailed || got.FailureReason != gitlab.FailureStuckOrTimeout || !got.Retried {
				t.Fatalf("an hour untouched: %+v", got)
			}
			if b := s.Builds()[0]; b.ID != build || b.Attempts() != 2 || b.State != gitlab.StatePending {
				t.Fatalf("GitLab's auto-retry applies to a reaped job: %+v", b)
			}
			// The runner learns it on its next request, as from GitLab.
			_, err := c.UpdateJob(ctx(t), j.ID, j.Token, gitlab.JobUpdate{State: gitlab.StateRunning})
			var se *gitlab.StatusError
			if !errors.As(err, &se) || se.Code != 403 || se.JobStatus != string(gitlab.StateFailed) {
				t.Fatalf("a keep-alive for a reaped job: %v", err)
			}
		})
	}
}

func TestTheReaperSleepsWhenDisabled(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := gitlabtest.NewServer(t, gitlabtest.WithClock(clk), gitlabtest.WithStaleJobTimeout(0))
	s.AddRunnerToken(token)
	s.EnqueueJob(gitlabtest.JobSpec{})
	c := newClient(t, s)
	j := take(t, c, token, "s")
	clk.SetTime(clk.Now().Add(24 * time.Hour))
	if _, err := c.UpdateJob(ctx(t), j.ID, j.Token, gitlab.JobUpdate{State: gitlab.StateSuccess}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Job(j.ID); got.State != gitlab.StateSuccess {
		t.Fatalf("got %+v", got)
	}
}
