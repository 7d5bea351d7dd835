package jobloop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// Environment variables gitlab-runner reads its settings from
// (common/config.go RunnerCredentials and RunnerSettings env tags).
const (
	envURL      = "CI_SERVER_URL"
	envToken    = "CI_SERVER_TOKEN"
	envCAFile   = "CI_SERVER_TLS_CA_FILE"
	envExecutor = "RUNNER_EXECUTOR"
)

// maxLogLine bounds one line of gitlab-runner's log kept for parsing.
const maxLogLine = 64 << 10

// RunProcess runs one job on a real Mac through gitlab-runner:
//
//	binary run-single --max-builds 1 --executor shell --url URL [--wait-timeout N]
//
// with CI_SERVER_URL, CI_SERVER_TOKEN, RUNNER_EXECUTOR and, for a CA
// bundle, CI_SERVER_TLS_CA_FILE in its environment (commands/single.go and
// common/config.go): the token goes only there, never into argv, which
// every process on the machine can read. CI_* and RUNNER_* variables of
// this process are not passed on, so nothing else configures the runner.
//
// gitlab-runner requests, runs and reports the job itself; RunProcess
// follows its log for the job id (job=<id>) and outcome ("Job succeeded",
// "Job failed … failure_reason=… exit_code=…") and reports them to
// onState as RunOne does. It ends gitlab-runner with ErrRunnerForbidden
// when gitlab-runner logs that GitLab refused the token, which it would
// otherwise retry every five minutes. A ctx that ends sends gitlab-runner
// SIGTERM, on which it fails the job itself (runner_system_failure), and
// SIGKILL after cfg.AbortGrace plus cfg.FinalUpdateTimeout.
//
// gitlab-runner picks its own system_id (s_ and a hash of the machine
// id); cfg.SystemID is only logged. clk stamps the state's times.
func RunProcess(ctx context.Context, cfg Config, binary string, clk clock.PassiveClock, log logr.Logger, onState func(State)) (State, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return State{}, err
	}
	if binary == "" {
		return State{}, fmt.Errorf("%w: no gitlab-runner binary", ErrInvalidConfig)
	}
	env := runnerEnv(os.Environ(), cfg)
	if len(cfg.CABundle) > 0 {
		f, err := os.CreateTemp("", "macrack-gitlab-ca-*.pem")
		if err != nil {
			return State{}, fmt.Errorf("%w: writing the CA bundle: %w", ErrProcess, err)
		}
		defer os.Remove(f.Name())
		_, werr := f.Write(cfg.CABundle)
		if cerr := f.Close(); werr != nil || cerr != nil {
			return State{}, fmt.Errorf("%w: writing the CA bundle: %w", ErrProcess, errors.Join(werr, cerr))
		}
		env = append(env, envCAFile+"="+f.Name())
	}
	args := []string{"run-single", "--max-builds", "1", "--executor", "shell", "--url", cfg.URL}
	args = append(args, WaitTimeoutArgs(cfg)...)
	return RunCommand(ctx, cfg, Command{Binary: binary, Args: args, Env: env}, clk, log, onState)
}

// Command is one gitlab-runner process for RunCommand.
type Command struct {
	// Binary is gitlab-runner's path.
	Binary string
	// Args are its arguments. They must not hold the token: every
	// process on the machine can read a process's argv.
	Args []string
	// Env is its whole environment.
	Env []string
}

// WaitTimeoutArgs is run-single's --wait-timeout for cfg.WaitTimeout, in
// whole seconds rounded up, or nothing when it is zero.
func WaitTimeoutArgs(cfg Config) []string {
	if cfg.WaitTimeout <= 0 {
		return nil
	}
	return []string{"--wait-timeout", strconv.Itoa(int(math.Ceil(cfg.WaitTimeout.Seconds())))}
}

// RunCommand runs a gitlab-runner run-single --max-builds 1 that c
// describes and follows its log as RunProcess does: the job's id and
// outcome go to onState, a refused token ends it with ErrRunnerForbidden,
// and a ctx that ends sends it SIGTERM, then SIGKILL after cfg.AbortGrace
// plus cfg.FinalUpdateTimeout. cfg.Token is masked in what it logs.
func RunCommand(ctx context.Context, cfg Config, c Command, clk clock.PassiveClock, log logr.Logger, onState func(State)) (State, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return State{}, err
	}
	if c.Binary == "" {
		return State{}, fmt.Errorf("%w: no gitlab-runner binary", ErrInvalidConfig)
	}
	for _, a := range c.Args {
		if strings.Contains(a, cfg.Token) {
			return State{}, fmt.Errorf("%w: the runner token is in gitlab-runner's arguments", ErrInvalidConfig)
		}
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	log = log.WithValues("systemID", cfg.SystemID)

	procCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	cmd := exec.CommandContext(procCtx, c.Binary, c.Args...)
	cmd.Env = c.Env
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = cfg.AbortGrace + cfg.FinalUpdateTimeout
	w := &watcher{clk: clk, log: log, token: cfg.Token, onState: onState, stop: stop}
	lines := &lineWriter{fn: w.line}
	cmd.Stdout, cmd.Stderr = lines, lines

	w.set(State{Phase: PhaseWaiting})
	log.Info("Starting gitlab-runner", "binary", c.Binary)
	runErr := cmd.Run()
	lines.flush()
	return w.result(ctx, procCtx, runErr)
}

// runnerEnv is this process's environment without CI_* and RUNNER_*
// variables, plus gitlab-runner's settings.
func runnerEnv(base []string, cfg Config) []string {
	env := make([]string, 0, len(base)+4)
	for _, kv := range base {
		if !strings.HasPrefix(kv, "CI_") && !strings.HasPrefix(kv, "RUNNER_") {
			env = append(env, kv)
		}
	}
	return append(env, envURL+"="+cfg.URL, envToken+"="+cfg.Token, envExecutor+"=shell")
}

// Patterns in gitlab-runner's log (log/runner_formatter.go writes
// "message   key=value …"; --log-format json writes "key":value).
var (
	ansiRe      = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)
	jobRe       = regexp.MustCompile(`(?:^|\s)job=(\d+)|"job":\s*(\d+)`)
	reasonRe    = regexp.MustCompile(`failure_reason=([a-z_]+)|"failure_reason":\s*"([a-z_]+)"`)
	exitCodeRe  = regexp.MustCompile(`exit_code=(-?\d+)|"exit_code":\s*(-?\d+)`)
	tokenWordRe = regexp.MustCompile(`[A-Za-z0-9_\-]{6,}`)
)

// watcher follows gitlab-runner's log.
type watcher struct {
	clk     clock.PassiveClock
	log     logr.Logger
	token   string
	onState func(State)
	stop    context.CancelCauseFunc

	state     State
	outcome   bool // the log said how the job ended
	forbidden bool
	noJob     bool
}

func (w *watcher) set(s State) {
	w.state = s.clone()
	if w.onState != nil {
		w.onState(s.clone())
	}
}

// redact masks the token and any piece of it in a log line, such as the
// nine characters gitlab-runner prints as the runner's short description.
func (w *watcher) redact(line string) string {
	line = tokenWordRe.ReplaceAllStringFunc(line, func(word string) string {
		if strings.Contains(w.token, word) {
			return gitlab.Masked
		}
		return word
	})
	return gitlab.Redact(line, w.token)
}

// line handles one line of the log.
func (w *watcher) line(raw string) {
	line := w.redact(ansiRe.ReplaceAllString(raw, ""))
	w.log.V(1).Info("Runner log line", "line", line)
	switch {
	case strings.Contains(line, "Checking for jobs... forbidden"):
		w.forbidden = true
		w.stop(ErrRunnerForbidden)
		return
	case strings.Contains(line, "has not received a job in"):
		w.noJob = true
		return
	}
	id := submatch(jobRe, line)
	if id == "" || w.outcome {
		return
	}
	jobID, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return
	}
	if w.state.Phase == PhaseWaiting {
		w.set(State{Phase: PhaseRunning, JobID: jobID, StartedAt: w.clk.Now()})
		w.log.Info("Job taken by gitlab-runner", "jobID", jobID)
	}
	if jobID != w.state.JobID {
		return
	}
	s := w.state.clone()
	switch {
	case strings.Contains(line, "Job succeeded"):
		s.Phase = PhaseSucceeded
		zero := int32(0)
		s.ExitCode = &zero
	case strings.Contains(line, "Job failed"):
		s.Phase = PhaseFailed
		s.FailureReason = submatch(reasonRe, line)
		if c, err := strconv.ParseInt(submatch(exitCodeRe, line), 10, 32); err == nil && c != 0 {
			code := int32(c)
			s.ExitCode = &code
		}
		if s.FailureReason == "" {
			s.FailureReason = string(gitlab.FailureUnknown)
		}
	default:
		return
	}
	s.FinishedAt = w.clk.Now()
	w.outcome = true
	w.set(s)
	w.log.Info("Job finished", "jobID", s.JobID, "phase", s.Phase, "failureReason", s.FailureReason)
}

// result is the final state once gitlab-runner exited.
func (w *watcher) result(ctx, procCtx context.Context, runErr error) (State, error) {
	var abort error
	if ctx.Err() != nil {
		abort = context.Cause(ctx)
	}
	switch {
	case w.forbidden:
		return w.state.clone(), fmt.Errorf("%w (gitlab-runner logged a 403)", ErrRunnerForbidden)
	case w.state.Phase == PhaseWaiting && abort != nil:
		return w.state.clone(), fmt.Errorf("waiting for a job: %w", abort)
	case w.state.Phase == PhaseWaiting && runErr != nil:
		return w.state.clone(), fmt.Errorf("%w: %w", ErrProcess, runErr)
	case w.state.Phase == PhaseWaiting:
		return w.state.clone(), ErrNoJob
	case w.outcome && abort != nil:
		return w.state.clone(), fmt.Errorf("job %d aborted: %w", w.state.JobID, abort)
	case w.outcome:
		return w.state.clone(), nil
	}
	s := w.state.clone()
	s.Phase = PhaseFailed
	s.FinishedAt = w.clk.Now()
	if abort != nil {
		// gitlab-runner was stopped under the job and fails it so.
		s.FailureReason = string(gitlab.FailureRunnerSystem)
		w.set(s)
		return s.clone(), fmt.Errorf("job %d aborted: %w", s.JobID, abort)
	}
	w.set(s)
	return s.clone(), fmt.Errorf("job %d: %w: %w", s.JobID, ErrNoResult, errors.Join(runErr, context.Cause(procCtx)))
}

// submatch returns the first non-empty group of re's first match.
func submatch(re *regexp.Regexp, s string) string {
	m := re.FindStringSubmatch(s)
	for i := 1; i < len(m); i++ {
		if m[i] != "" {
			return m[i]
		}
	}
	return ""
}

// lineWriter splits what gitlab-runner writes into lines for fn, cutting
// a line at maxLogLine. exec calls Write from one goroutine at a time when
// Stdout and Stderr are the same writer; the mutex also covers flush.
type lineWriter struct {
	mu  sync.Mutex
	buf []byte
	fn  func(string)
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.fn(string(bytes.TrimRight(l.buf[:min(i, maxLogLine)], "\r")))
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > maxLogLine {
		l.fn(string(l.buf[:maxLogLine]))
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.fn(string(l.buf))
		l.buf = nil
	}
}
