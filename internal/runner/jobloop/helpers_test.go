package jobloop

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boualleiguie/macrack-operator/internal/gitlab/gitlabtest"
)

// waitLimit bounds every wait in these tests, so a hang fails, not stalls.
const waitLimit = 10 * time.Second

const runnerToken = "glrt-t1_jobloopRUNNERsecret42"

var epoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// logBuffer collects a logger's lines, to check no token is logged.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.buf.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 1})
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// env is a fake GitLab with one runner token, and a Config for it.
type env struct {
	t    *testing.T
	gl   *gitlabtest.Server
	cfg  Config
	logs *logBuffer
}

func newEnv(t *testing.T, opts ...gitlabtest.Option) *env {
	t.Helper()
	gl := gitlabtest.NewServer(t, opts...)
	gl.AddRunnerToken(runnerToken)
	e := &env{t: t, gl: gl, logs: &logBuffer{}, cfg: Config{
		URL:           gl.URL(),
		Token:         runnerToken,
		SystemID:      "s_vm1",
		CABundle:      gl.CABundle(),
		Tags:          []string{"macos"},
		PollInterval:  10 * time.Millisecond,
		TraceInterval: 10 * time.Millisecond,
		AbortGrace:    time.Second,
	}}
	t.Cleanup(func() { e.assertNoToken(e.logs.String(), "the log") })
	return e
}

// assertNoToken fails if s holds the runner token, a piece of it, or a
// job token.
func (e *env) assertNoToken(s, what string) {
	e.t.Helper()
	for _, secret := range []string{runnerToken, "RUNNERsecret", "jobloopRUN", "glcbt-"} {
		if strings.Contains(s, secret) {
			e.t.Errorf("%s holds a token (%q): %s", what, secret, s)
		}
	}
}

// result is what RunOne returned.
type result struct {
	state  State
	err    error
	phases []Phase
}

// start runs RunOne in the background; states receives every State. clk
// nil means the real clock.
func (e *env) start(ctx context.Context, exec Executor, clk clock.Clock) (<-chan result, <-chan State) {
	e.t.Helper()
	states := make(chan State, 16)
	out := make(chan result, 1)
	go func() {
		var phases []Phase
		st, err := RunOne(ctx, e.cfg, exec, clk, e.logs.logger(), func(s State) {
			phases = append(phases, s.Phase)
			select {
			case states <- s:
			default:
			}
		})
		out <- result{st, err, phases}
	}()
	return out, states
}

// await waits for RunOne's result.
func (e *env) await(out <-chan result) result {
	e.t.Helper()
	select {
	case r := <-out:
		if r.err != nil {
			e.assertNoToken(r.err.Error(), "the error")
		}
		return r
	case <-time.After(waitLimit):
		e.t.Fatal("RunOne did not return")
		return result{}
	}
}

// awaitPhase waits for the loop to report phase.
func (e *env) awaitPhase(states <-chan State, phase Phase) State {
	e.t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case s := <-states:
			if s.Phase == phase {
				return s
			}
		case <-deadline:
			e.t.Fatalf("the loop never reported %s", phase)
			return State{}
		}
	}
}

// eventually polls cond until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// pump steps clk by step whenever something waits on it, until stop is
// closed: for tests where the loop's clock waits must pass but their
// exact timing does not matter.
func pump(clk *clocktesting.FakeClock, step time.Duration, stop <-chan struct{}) {
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if clk.HasWaiters() {
				clk.Step(step)
			}
		}
	}()
}

// job finds the fake's one job of a build, by attempt.
func (e *env) job(build int64, attempt int) gitlabtest.Job {
	e.t.Helper()
	for _, j := range e.gl.Jobs() {
		if j.BuildID == build && j.Attempt == attempt {
			return j
		}
	}
	e.t.Fatalf("build %d has no attempt %d", build, attempt)
	return gitlabtest.Job{}
}
