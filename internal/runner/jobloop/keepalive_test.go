package jobloop

import (
	"context"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/gitlab/gitlabtest"
)

// stepUntil steps clk by step while the loop waits on it as it does while
// the job sleeps (the deadline, the trace tick and the sleep), until d
// has passed; each step lets the loop's tick run before the next.
func stepUntil(t *testing.T, clk *clocktesting.FakeClock, step, d time.Duration) {
	t.Helper()
	for passed := time.Duration(0); passed < d; passed += step {
		eventually(t, "the loop waits on its tick again", func() bool { return clk.Waiters() == 3 })
		clk.Step(step)
	}
}

func TestASilentJobSurvivesGitLabsReaperThroughKeepAlives(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keepAlive time.Duration
		survives  bool
	}{
		{"keep-alives after 30 s of silence keep a 2 h sleep running", 0, true},
		{"with no keep-alive within the hour the reaper fails it as stuck", 3 * time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(epoch)
			e := newEnv(t, gitlabtest.WithClock(clk))
			e.cfg.KeepAliveInterval = tc.keepAlive
			build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"echo start", "sleep 2h", "echo done"}, Timeout: 3 * time.Hour})
			out, states := e.start(context.Background(), SimExecutor{Clock: clk}, clk)
			e.awaitPhase(states, PhaseRunning)
			stepUntil(t, clk, 20*time.Second, 2*time.Hour-20*time.Second)
			eventually(t, "the loop waits on its tick again", func() bool { return clk.Waiters() == 3 })

			got := e.job(build, 1)
			if !tc.survives {
				if got.State != gitlab.StateFailed || got.FailureReason != gitlab.FailureStuckOrTimeout {
					t.Fatalf("GitLab has %+v", got)
				}
				if n := e.gl.Requests(gitlab.EndpointUpdateJob); n != 0 {
					t.Fatalf("%d updates were sent", n)
				}
				clk.Step(20 * time.Second)
				e.await(out)
				return
			}
			if got.State != gitlab.StateRunning {
				t.Fatalf("a kept-alive job is %+v", got)
			}
			// A touch every 40 s: the first tick more than 30 s after the last.
			if n := e.gl.Requests(gitlab.EndpointUpdateJob); n < 170 || n > 180 {
				t.Fatalf("%d keep-alives in 2 h", n)
			}
			clk.Step(20 * time.Second)
			if r := e.await(out); r.err != nil || r.state.Phase != PhaseSucceeded {
				t.Fatalf("%+v %v", r.state, r.err)
			}
			if got := e.job(build, 1); got.State != gitlab.StateSuccess || !strings.Contains(got.Trace, "$ echo done\ndone\n") {
				t.Fatalf("GitLab has %+v", got)
			}
		})
	}
}

func TestAKeepAliveTellsASilentJobThatGitLabCancelledIt(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	e := newEnv(t, gitlabtest.WithClock(clk))
	build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"echo start", "sleep 2h", "echo done"}, Timeout: 3 * time.Hour})
	out, states := e.start(context.Background(), SimExecutor{Clock: clk}, clk)
	e.awaitPhase(states, PhaseRunning)
	stepUntil(t, clk, 20*time.Second, 2*time.Minute)
	if !e.gl.CancelJob(e.job(build, 1).ID) {
		t.Fatal("the job was not running")
	}
	// The next keep-alive, 40 s on at most, is answered 403 canceled.
	var r result
	for r.phases == nil {
		select {
		case r = <-out:
		case <-time.After(time.Millisecond):
			if clk.Waiters() == 3 && clk.Since(epoch) < time.Hour {
				clk.Step(20 * time.Second)
			}
		}
	}
	if r.state.Phase != PhaseFailed || r.state.FailureReason != FailureJobCanceled {
		t.Fatalf("state %+v %v", r.state, r.err)
	}
	if clk.Since(epoch) > 3*time.Minute {
		t.Fatalf("the job learnt of its cancel after %s", clk.Since(epoch))
	}
}
