package jobloop

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/gitlab/gitlabtest"
)

func TestTheFinalUpdateBackoffDoublesFromASecondUpToItsCap(t *testing.T) {
	for _, tc := range []struct {
		name string
		try  int
		max  time.Duration
		want time.Duration
	}{
		{"the first failure waits a second", 1, time.Hour, time.Second},
		{"the second waits two", 2, time.Hour, 2 * time.Second},
		{"the ninth, the last wait of ten tries, waits 256 s", 9, time.Hour, 256 * time.Second},
		{"the thirteenth would wait 4096 s but waits the 60 min cap", 13, time.Hour, time.Hour},
		{"a try far past the cap waits the cap", 500, time.Hour, time.Hour},
		{"a lower cap is kept", 4, 5 * time.Second, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := finalUpdateBackoff(tc.try, tc.max); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// awaitFinalTries steps clk through the waits between final update
// tries, checking each try comes exactly when its wait has passed.
func awaitFinalTries(t *testing.T, e *env, clk *clocktesting.FakeClock, waits []time.Duration) {
	t.Helper()
	for i, w := range waits {
		eventually(t, "the try failed", func() bool { return e.gl.Requests(gitlab.EndpointUpdateJob) == i+1 })
		// The deadline, the backoff, and until the first step the trace
		// tick.
		want := 2
		if i == 0 {
			want = 3
		}
		eventually(t, "the loop backs off", func() bool { return clk.Waiters() == want })
		clk.Step(w - time.Millisecond)
		time.Sleep(10 * time.Millisecond)
		if n := e.gl.Requests(gitlab.EndpointUpdateJob); n != i+1 {
			t.Fatalf("try %d came before its %s wait", n, w)
		}
		clk.Step(time.Millisecond)
	}
}

func TestTheFinalUpdateIsRetriedWithBackoffUntilGitLabTakesIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
	}{
		{"after 500s", 500},
		{"after 502s from a proxy", 502},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"echo hi"}})
			e.gl.SetFault(gitlab.EndpointUpdateJob, gitlabtest.Fault{Status: tc.status, Times: 3})
			clk := clocktesting.NewFakeClock(epoch)
			out, _ := e.start(context.Background(), SimExecutor{Clock: clk}, clk)
			awaitFinalTries(t, e, clk, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second})
			r := e.await(out)
			if r.err != nil || r.state.Phase != PhaseSucceeded {
				t.Fatalf("%+v %v", r.state, r.err)
			}
			if got := e.job(build, 1); got.State != gitlab.StateSuccess || !got.TraceChecksumOK || e.gl.Requests(gitlab.EndpointUpdateJob) != 4 {
				t.Fatalf("GitLab has %+v after %d updates", got, e.gl.Requests(gitlab.EndpointUpdateJob))
			}
		})
	}
}

func TestTheFinalUpdateGivesUpAfterTenTries(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   time.Duration
		waits []time.Duration
	}{
		{"with gitlab-runner's 60 min cap, 1 s to 256 s", 0, []time.Duration{
			1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
			32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second}},
		{"with a 5 s cap", 5 * time.Second, []time.Duration{
			1 * time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second,
			5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.cfg.FinalUpdateBackoffMax = tc.max
			build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"echo hi"}})
			e.gl.SetFault(gitlab.EndpointUpdateJob, gitlabtest.Fault{Status: 500})
			clk := clocktesting.NewFakeClock(epoch)
			out, _ := e.start(context.Background(), SimExecutor{Clock: clk}, clk)
			awaitFinalTries(t, e, clk, tc.waits)
			r := e.await(out)
			if !errors.Is(r.err, ErrFinalUpdate) || r.state.Phase != PhaseSucceeded {
				t.Fatalf("%+v %v", r.state, r.err)
			}
			if n := e.gl.Requests(gitlab.EndpointUpdateJob); n != 10 {
				t.Fatalf("%d tries", n)
			}
			if got := e.job(build, 1); got.State != gitlab.StateRunning {
				t.Fatalf("GitLab has %+v", got)
			}
		})
	}
}

func TestAFinalUpdateGitLabRefusesAsABadRequestIsNotRetried(t *testing.T) {
	e := newEnv(t)
	e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"echo hi"}})
	e.gl.SetFault(gitlab.EndpointUpdateJob, gitlabtest.Fault{Status: 400})
	clk := clocktesting.NewFakeClock(epoch)
	out, _ := e.start(context.Background(), SimExecutor{Clock: clk}, clk)
	r := e.await(out)
	if !errors.Is(r.err, ErrFinalUpdate) || e.gl.Requests(gitlab.EndpointUpdateJob) != 1 {
		t.Fatalf("%v after %d updates", r.err, e.gl.Requests(gitlab.EndpointUpdateJob))
	}
}
