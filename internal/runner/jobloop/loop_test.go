package jobloop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/gitlab/gitlabtest"
)

func TestOneJobSucceedsWithItsFullTrace(t *testing.T) {
	e := newEnv(t)
	out, states := e.start(context.Background(), SimExecutor{}, nil)
	e.awaitPhase(states, PhaseWaiting)
	eventually(t, "the loop polled", func() bool { return e.gl.Requests(gitlab.EndpointRequestJob) > 0 })
	build := e.gl.EnqueueJob(gitlabtest.JobSpec{Name: "build", Script: []string{"echo hello", "echo 'quoted world'", "true"}})
	r := e.await(out)

	if r.err != nil {
		t.Fatal(r.err)
	}
	got := e.job(build, 1)
	if r.state.Phase != PhaseSucceeded || r.state.JobID != got.ID || r.state.ExitCode == nil || *r.state.ExitCode != 0 ||
		r.state.QueuedSeconds == nil || r.state.StartedAt.IsZero() || r.state.FinishedAt.IsZero() || r.state.FailureReason != "" {
		t.Fatalf("state %+v", r.state)
	}
	if !slices.Equal(r.phases, []Phase{PhaseWaiting, PhaseRunning, PhaseSucceeded}) {
		t.Fatalf("phases %v", r.phases)
	}
	want := "Running with macrack jobloop, system ID: s_vm1\n" +
		"$ echo hello\nhello\n" +
		"$ echo 'quoted world'\nquoted world\n" +
		"$ true\n" +
		"Job succeeded\n"
	if got.State != gitlab.StateSuccess || got.Trace != want || !got.TraceChecksumOK || got.SystemID != "s_vm1" {
		t.Fatalf("GitLab has %+v\ntrace:\n%s", got, got.Trace)
	}
}

func TestAFailingScriptIsAScriptFailureWithItsExitCode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script []string
		code   int
	}{
		{"exit 3 fails the job with exit code 3", []string{"echo before", "exit 3", "echo after"}, 3},
		{"fail fails the job with exit code 1", []string{"fail", "echo after"}, 1},
		{"exit 0 ends the script successfully", []string{"exit 0", "fail"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: tc.script, AfterScript: []string{"echo cleanup"}})
			out, _ := e.start(context.Background(), SimExecutor{}, nil)
			r := e.await(out)
			if r.err != nil {
				t.Fatal(r.err)
			}
			got := e.job(build, 1)
			if strings.Contains(got.Trace, "$ echo after") || !strings.Contains(got.Trace, "Running after_script\n$ echo cleanup\ncleanup\n") {
				t.Fatalf("trace:\n%s", got.Trace)
			}
			if tc.code == 0 {
				if r.state.Phase != PhaseSucceeded || got.State != gitlab.StateSuccess {
					t.Fatalf("positive control: %+v, GitLab has %+v", r.state, got)
				}
				return
			}
			if r.state.Phase != PhaseFailed || r.state.FailureReason != "script_failure" || r.state.ExitCode == nil || *r.state.ExitCode != int32(tc.code) {
				t.Fatalf("state %+v", r.state)
			}
			if got.State != gitlab.StateFailed || got.FailureReason != gitlab.FailureScript || got.ExitCode != tc.code || !got.TraceChecksumOK {
				t.Fatalf("GitLab has %+v", got)
			}
			if !strings.HasSuffix(got.Trace, fmt.Sprintf("ERROR: Job failed: exit code %d\n", tc.code)) {
				t.Fatalf("trace:\n%s", got.Trace)
			}
		})
	}
}

func TestAJobThatOutlivesItsTimeoutFailsWithJobExecutionTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		max     time.Duration
		after   time.Duration
	}{
		{"the job's own timeout ends it", 10 * time.Minute, 0, 10 * time.Minute},
		{"MaxJobDuration ends a job with a longer timeout", time.Hour, 5 * time.Minute, 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.cfg.MaxJobDuration = tc.max
			build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"echo working", "sleep 2h", "echo done"}, Timeout: tc.timeout})
			clk := clocktesting.NewFakeClock(epoch)
			out, states := e.start(context.Background(), SimExecutor{Clock: clk}, clk)
			e.awaitPhase(states, PhaseRunning)
			// The deadline, the trace tick and the script's sleep.
			eventually(t, "the job sleeps", func() bool { return clk.Waiters() == 3 })
			clk.Step(tc.after - time.Second)
			select {
			case r := <-out:
				t.Fatalf("the job ended a second early: %+v", r.state)
			case <-time.After(20 * time.Millisecond):
			}
			clk.Step(time.Second)
			r := e.await(out)
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.state.Phase != PhaseFailed || r.state.FailureReason != "job_execution_timeout" || r.state.ExitCode != nil {
				t.Fatalf("state %+v", r.state)
			}
			got := e.job(build, 1)
			if got.FailureReason != gitlab.FailureJobExecutionTimeout || strings.Contains(got.Trace, "$ echo done") ||
				!strings.Contains(got.Trace, "ERROR: Job failed: execution took longer than "+tc.after.String()) {
				t.Fatalf("GitLab has %+v\n%s", got, got.Trace)
			}
		})
	}
}

func TestAnAbortMidJobIsARunnerSystemFailureThatGitLabRetries(t *testing.T) {
	e := newEnv(t)
	e.cfg.FinalUpdateTimeout = 2 * time.Second
	build := e.gl.EnqueueJob(gitlabtest.JobSpec{
		Script:  []string{"echo started", "sleep 1h", "echo finished"},
		Timeout: 2 * time.Hour,
		Retry:   gitlabtest.Retry{Max: 1, When: []string{"runner_system_failure"}},
	})
	clk := clocktesting.NewFakeClock(epoch)
	ctx, abort := context.WithCancelCause(context.Background())
	out, states := e.start(ctx, SimExecutor{Clock: clk}, clk)
	e.awaitPhase(states, PhaseRunning)
	eventually(t, "the job sleeps", func() bool { return clk.Waiters() == 3 })
	began := time.Now()
	abort(ErrSystemShutdown)
	r := e.await(out)
	if time.Since(began) > 2*time.Second {
		t.Fatalf("reporting the abort took %s", time.Since(began))
	}

	if !errors.Is(r.err, ErrSystemShutdown) {
		t.Fatalf("want the abort's cause, got %v", r.err)
	}
	if r.state.Phase != PhaseFailed || r.state.FailureReason != "runner_system_failure" || r.state.ExitCode != nil {
		t.Fatalf("state %+v", r.state)
	}
	first := e.job(build, 1)
	if first.State != gitlab.StateFailed || first.FailureReason != gitlab.FailureRunnerSystem || !first.Retried {
		t.Fatalf("GitLab has %+v", first)
	}
	if !strings.Contains(first.Trace, "$ echo started\nstarted\n") || strings.Contains(first.Trace, "finished") ||
		!strings.HasSuffix(first.Trace, "ERROR: Job failed (system failure): aborted: system shutdown\n") {
		t.Fatalf("trace:\n%s", first.Trace)
	}

	// GitLab re-enqueued the job; a fresh VM takes the retry and finishes it.
	if retry := e.job(build, 2); retry.State != gitlab.StatePending {
		t.Fatalf("the retry is %+v", retry)
	}
	e.cfg.SystemID = "s_vm2"
	clk2 := clocktesting.NewFakeClock(epoch)
	out2, states2 := e.start(context.Background(), SimExecutor{Clock: clk2}, clk2)
	e.awaitPhase(states2, PhaseRunning)
	eventually(t, "the retry sleeps", func() bool { return clk2.Waiters() == 3 })
	clk2.Step(time.Hour)
	if r2 := e.await(out2); r2.err != nil || r2.state.Phase != PhaseSucceeded {
		t.Fatalf("the retry: %+v %v", r2.state, r2.err)
	}
	b := e.gl.Builds()[0]
	if b.State != gitlab.StateSuccess || b.Attempts() != 2 || e.job(build, 2).SystemID != "s_vm2" {
		t.Fatalf("build %+v", b)
	}
}

func TestAnAbortIsReportedEvenWhenTheExecutorIgnoresIt(t *testing.T) {
	e := newEnv(t)
	e.cfg.AbortGrace = time.Minute
	build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"anything"}})
	clk := clocktesting.NewFakeClock(epoch)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	stubborn := executorFunc(func(ctx context.Context, _ Job, _ func(string)) (int, error) {
		<-release
		return 0, nil
	})
	ctx, abort := context.WithCancelCause(context.Background())
	out, states := e.start(ctx, stubborn, clk)
	e.awaitPhase(states, PhaseRunning)
	abort(ErrSystemShutdown)
	// The deadline, the trace tick and the abort grace.
	eventually(t, "the loop waits out the grace", func() bool { return clk.Waiters() == 3 })
	clk.Step(time.Minute)
	r := e.await(out)
	if r.state.FailureReason != "runner_system_failure" || e.job(build, 1).FailureReason != gitlab.FailureRunnerSystem {
		t.Fatalf("state %+v, GitLab has %+v", r.state, e.job(build, 1))
	}
}

func TestARevokedTokenEndsTheLoopWithoutTakingAJob(t *testing.T) {
	for _, tc := range []struct {
		name    string
		revoked bool
	}{
		{"a valid token takes the job", false},
		{"a revoked token takes no job and ends the loop", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"true"}})
			if tc.revoked {
				e.gl.RevokeRunnerToken(runnerToken)
			}
			out, _ := e.start(context.Background(), SimExecutor{}, nil)
			r := e.await(out)
			if !tc.revoked {
				if r.err != nil || e.job(build, 1).State != gitlab.StateSuccess {
					t.Fatalf("positive control: %v", r.err)
				}
				return
			}
			if !errors.Is(r.err, ErrRunnerForbidden) || !errors.Is(r.err, gitlab.ErrForbidden) {
				t.Fatalf("want ErrRunnerForbidden, got %v", r.err)
			}
			if r.state.Phase != PhaseWaiting || r.state.JobID != 0 || e.job(build, 1).State != gitlab.StatePending {
				t.Fatalf("state %+v", r.state)
			}
			if n := e.gl.Requests(gitlab.EndpointRequestJob); n != 1 {
				t.Fatalf("asked %d times, want once", n)
			}
		})
	}
}

func TestTheTraceRecoversFromA416AfterALostAnswer(t *testing.T) {
	e := newEnv(t)
	build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"echo one", "echo two"}})
	// GitLab appends the first patch, but its answer is lost: the loop
	// sends the same bytes again, GitLab answers 416 with the length it
	// holds, and the loop goes on from there.
	e.gl.SetFault(gitlab.EndpointPatchTrace, gitlabtest.Fault{Status: 502, AfterHandling: true, Times: 1})
	out, _ := e.start(context.Background(), SimExecutor{}, nil)
	r := e.await(out)
	if r.err != nil {
		t.Fatal(r.err)
	}
	got := e.job(build, 1)
	want := "Running with macrack jobloop, system ID: s_vm1\n$ echo one\none\n$ echo two\ntwo\nJob succeeded\n"
	if got.Trace != want || !got.TraceChecksumOK || got.State != gitlab.StateSuccess {
		t.Fatalf("GitLab has %+v\ntrace:\n%q", got, got.Trace)
	}
	if n := e.gl.Requests(gitlab.EndpointPatchTrace); n < 2 {
		t.Fatalf("%d patches", n)
	}
}

func TestAJobThatGitLabCancelsStopsAndIsNotRetried(t *testing.T) {
	e := newEnv(t)
	build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"sleep 1h", "echo never"}, Retry: gitlabtest.Retry{Max: 2}})
	clk := clocktesting.NewFakeClock(epoch)
	out, states := e.start(context.Background(), SimExecutor{Clock: clk}, clk)
	st := e.awaitPhase(states, PhaseRunning)
	eventually(t, "the job sleeps", func() bool { return clk.Waiters() == 3 })
	if !e.gl.CancelJob(st.JobID) {
		t.Fatal("the job was not running")
	}
	clk.Step(e.cfg.TraceInterval)
	r := e.await(out)
	if !errors.Is(r.err, ErrJobCanceled) || errors.Is(r.err, ErrFinalUpdate) {
		t.Fatalf("want ErrJobCanceled alone, got %v", r.err)
	}
	if r.state.Phase != PhaseFailed || r.state.FailureReason != FailureJobCanceled {
		t.Fatalf("state %+v", r.state)
	}
	if b := e.gl.Builds()[0]; b.State != gitlab.StateCanceled || b.Attempts() != 1 || b.ID != build {
		t.Fatalf("build %+v", b)
	}
}

func TestA202OnTheFinalUpdateIsSentAgainAfterGitLabsInterval(t *testing.T) {
	e := newEnv(t)
	build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"echo hi"}})
	e.gl.SetFault(gitlab.EndpointUpdateJob, gitlabtest.Fault{
		Status: 202, Times: 1, Header: map[string][]string{"X-Gitlab-Trace-Update-Interval": {"5"}},
	})
	clk := clocktesting.NewFakeClock(epoch)
	out, _ := e.start(context.Background(), SimExecutor{Clock: clk}, clk)
	eventually(t, "GitLab accepted the first update", func() bool { return e.gl.Requests(gitlab.EndpointUpdateJob) == 1 })
	// The deadline, the trace tick and the wait GitLab asked for.
	eventually(t, "the loop waits", func() bool { return clk.Waiters() == 3 })
	clk.Step(4 * time.Second)
	time.Sleep(20 * time.Millisecond)
	if n := e.gl.Requests(gitlab.EndpointUpdateJob); n != 1 {
		t.Fatalf("sent again after 4 s of GitLab's 5: %d updates", n)
	}
	clk.Step(time.Second)
	if r := e.await(out); r.err != nil || r.state.Phase != PhaseSucceeded {
		t.Fatalf("%+v %v", r.state, r.err)
	}
	if got := e.job(build, 1); got.State != gitlab.StateSuccess || e.gl.Requests(gitlab.EndpointUpdateJob) != 2 {
		t.Fatalf("GitLab has %+v", got)
	}
}

func TestAFinalUpdateGitLabNeverTakesIsGivenUpInBoundedTimeAfterAnAbort(t *testing.T) {
	e := newEnv(t)
	e.cfg.FinalUpdateTimeout = 30 * time.Second
	e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"echo hi", "sleep 1h"}})
	e.gl.SetFault(gitlab.EndpointUpdateJob, gitlabtest.Fault{Stall: time.Minute})
	clk := clocktesting.NewFakeClock(epoch)
	ctx, abort := context.WithCancelCause(context.Background())
	out, states := e.start(ctx, SimExecutor{Clock: clk}, clk)
	e.awaitPhase(states, PhaseRunning)
	eventually(t, "the job sleeps", func() bool { return clk.Waiters() == 3 })
	abort(ErrSystemShutdown)
	eventually(t, "the final update stalls", func() bool { return e.gl.Requests(gitlab.EndpointUpdateJob) == 1 })
	// The deadline, the trace tick, the abort grace and the final update's
	// bound.
	eventually(t, "the loop bounds the final update", func() bool { return clk.Waiters() == 4 })
	clk.Step(29 * time.Second)
	select {
	case r := <-out:
		t.Fatalf("gave up a second early: %+v %v", r.state, r.err)
	case <-time.After(20 * time.Millisecond):
	}
	clk.Step(time.Second)
	r := e.await(out)
	if !errors.Is(r.err, ErrFinalUpdate) || !errors.Is(r.err, ErrSystemShutdown) || r.state.Phase != PhaseFailed {
		t.Fatalf("got %+v %v", r.state, r.err)
	}
}

func TestWaitingCancelledTakesNoJob(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stall  bool
		cancel bool
	}{
		{"a loop left waiting takes the job once it comes", false, false},
		{"a loop cancelled between polls takes no job", false, true},
		{"a loop cancelled during a stalled poll takes no job", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.stall {
				e.gl.SetFault(gitlab.EndpointRequestJob, gitlabtest.Fault{Stall: time.Minute})
			}
			clk := clocktesting.NewFakeClock(epoch)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			out, _ := e.start(ctx, SimExecutor{Clock: clk}, clk)
			eventually(t, "the loop polled", func() bool { return e.gl.Requests(gitlab.EndpointRequestJob) == 1 })
			if !tc.stall {
				eventually(t, "the loop sleeps", func() bool { return clk.Waiters() == 1 })
			}
			if tc.cancel {
				cancel(ErrSystemShutdown)
				r := e.await(out)
				if !errors.Is(r.err, ErrSystemShutdown) || r.state.Phase != PhaseWaiting {
					t.Fatalf("got %+v %v", r.state, r.err)
				}
			}
			e.gl.ClearFault(gitlab.EndpointRequestJob)
			build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"true"}})
			clk.Step(e.cfg.PollInterval)
			if tc.cancel {
				time.Sleep(20 * time.Millisecond)
				if got := e.job(build, 1); got.State != gitlab.StatePending || e.gl.Requests(gitlab.EndpointRequestJob) != 1 {
					t.Fatalf("the job was taken: %+v", got)
				}
				return
			}
			if r := e.await(out); r.err != nil || e.job(build, 1).State != gitlab.StateSuccess {
				t.Fatalf("positive control: %+v %v", r.state, r.err)
			}
		})
	}
}

func TestPollingBacksOffOnErrorsThenPollsEveryIntervalWithLastUpdate(t *testing.T) {
	e := newEnv(t)
	clk := clocktesting.NewFakeClock(epoch)
	e.gl.SetFault(gitlab.EndpointRequestJob, gitlabtest.Fault{Status: 503, Times: 2})
	out, _ := e.start(context.Background(), SimExecutor{Clock: clk}, clk)
	for i, wait := range []time.Duration{20 * time.Millisecond, 40 * time.Millisecond} {
		eventually(t, "the loop backs off", func() bool { return clk.Waiters() == 1 && e.gl.Requests(gitlab.EndpointRequestJob) == i+1 })
		clk.Step(wait - time.Millisecond)
		time.Sleep(10 * time.Millisecond)
		if e.gl.Requests(gitlab.EndpointRequestJob) != i+1 {
			t.Fatalf("asked again before the backoff of %s", wait)
		}
		clk.Step(time.Millisecond)
	}
	eventually(t, "a plain poll", func() bool { return clk.Waiters() == 1 && e.gl.Requests(gitlab.EndpointRequestJob) == 3 })
	clk.Step(e.cfg.PollInterval)
	eventually(t, "a poll that sends last_update back", func() bool { return clk.Waiters() == 1 && e.gl.LastUpdateHits() == 1 })
	build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"true"}})
	clk.Step(e.cfg.PollInterval)
	if r := e.await(out); r.err != nil || e.job(build, 1).State != gitlab.StateSuccess {
		t.Fatalf("%+v %v", r.state, r.err)
	}
	if !strings.Contains(e.logs.String(), "Requesting a job failed, retrying") {
		t.Fatalf("the failures were not logged:\n%s", e.logs)
	}
}

func TestNoJobBeforeTheWaitTimeoutEndsTheLoop(t *testing.T) {
	e := newEnv(t)
	e.cfg.WaitTimeout = 25 * time.Millisecond
	clk := clocktesting.NewFakeClock(epoch)
	stop := make(chan struct{})
	defer close(stop)
	pump(clk, 5*time.Millisecond, stop)
	out, _ := e.start(context.Background(), SimExecutor{Clock: clk}, clk)
	r := e.await(out)
	if !errors.Is(r.err, ErrNoJob) || r.state.Phase != PhaseWaiting {
		t.Fatalf("got %+v %v", r.state, r.err)
	}
	if n := e.gl.Requests(gitlab.EndpointRequestJob); n < 2 || n > 4 {
		t.Fatalf("%d polls in 25 ms at 10 ms", n)
	}
}

func TestTheTraceMasksTokensAndMaskedVariables(t *testing.T) {
	e := newEnv(t)
	build := e.gl.EnqueueJob(gitlabtest.JobSpec{
		Script: []string{"echo key=s3cr3t-value-1234 and " + runnerToken, "echo plain-value"},
		Variables: []gitlab.Variable{
			{Key: "SECRET", Value: "s3cr3t-value-1234", Masked: true},
			{Key: "PLAIN", Value: "plain-value", Public: true},
		},
	})
	out, _ := e.start(context.Background(), SimExecutor{}, nil)
	if r := e.await(out); r.err != nil {
		t.Fatal(r.err)
	}
	got := e.job(build, 1).Trace
	if strings.Contains(got, "s3cr3t") || strings.Contains(got, runnerToken) {
		t.Fatalf("trace:\n%s", got)
	}
	if !strings.Contains(got, "key=[MASKED] and [MASKED]\n") || !strings.Contains(got, "\nplain-value\n") {
		t.Fatalf("trace:\n%s", got)
	}
}

func TestRunOneRefusesAnIncompleteConfig(t *testing.T) {
	good := Config{URL: "https://gitlab.example.com", Token: runnerToken, SystemID: "s"}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		exec Executor
	}{
		{"no URL", func(c *Config) { c.URL = "" }, SimExecutor{}},
		{"no token", func(c *Config) { c.Token = "" }, SimExecutor{}},
		{"no system id", func(c *Config) { c.SystemID = "" }, SimExecutor{}},
		{"a negative poll interval", func(c *Config) { c.PollInterval = -1 }, SimExecutor{}},
		{"no executor", func(*Config) {}, nil},
		{"an http URL", func(c *Config) { c.URL = "http://gitlab.example.com" }, SimExecutor{}},
	} {
		t.Run("a config with "+tc.name+" is refused", func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			_, err := RunOne(context.Background(), cfg, tc.exec, nil, (&logBuffer{}).logger(), nil)
			if !errors.Is(err, ErrInvalidConfig) && !errors.Is(err, gitlab.ErrInvalidConfig) {
				t.Fatalf("got %v", err)
			}
			if err != nil && strings.Contains(err.Error(), runnerToken) {
				t.Fatalf("the error quotes the token: %v", err)
			}
		})
	}
	if _, err := good.withDefaults(); err != nil {
		t.Fatalf("positive control: %v", err)
	}
}

func TestNeitherTheConfigNorTheStatePrintsAToken(t *testing.T) {
	cfg := Config{URL: "https://gitlab.example.com", Token: runnerToken, SystemID: "s_1", CABundle: []byte("pem")}
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), fmt.Sprint(cfg.MarshalLog())} {
		if strings.Contains(s, runnerToken) || strings.Contains(s, "RUNNERsecret") {
			t.Fatalf("printed the token: %s", s)
		}
	}
	b, err := json.Marshal(State{Phase: PhaseFailed, JobID: 5, StartedAt: epoch, FailureReason: "script_failure", ExitCode: new(int32(2)), QueuedSeconds: new(int64(3))})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"phase":"Failed","jobID":5,"startedAt":"2026-03-01T09:00:00Z","failureReason":"script_failure","exitCode":2,"queuedSeconds":3}`
	if string(b) != want {
		t.Fatalf("got %s", b)
	}
}

// executorFunc adapts a function to Executor; say writes a line.
type executorFunc func(ctx context.Context, job Job, say func(string)) (int, error)

func (f executorFunc) Run(ctx context.Context, job Job, out io.Writer) (int, error) {
	return f(ctx, job, func(s string) { _, _ = out.Write([]byte(s + "\n")) })
}
