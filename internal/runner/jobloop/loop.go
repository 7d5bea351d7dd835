package jobloop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// maxBackoff caps the wait between job requests after failures.
const maxBackoff = time.Minute

// maxPatchTries bounds the PATCHes of one flush, so that a GitLab that
// keeps answering 416 cannot hold the loop.
const maxPatchTries = 5

// Internal cancel causes of a running job.
var (
	errJobTimeout   = errors.New("job timeout")
	errExecutorHung = errors.New("executor did not stop after the job was cancelled")
	// errFinalUpdateTimeout ends the final update FinalUpdateTimeout
	// after RunOne's ctx ended.
	errFinalUpdateTimeout = errors.New("final update timeout")
)

// RunOne takes exactly one job and runs it with exec, then returns its
// final State. It reports each phase to onState (if not nil) from its own
// goroutine, synchronously: Waiting, Running, then Succeeded or Failed
// once GitLab has the final state (or gave up on it).
//
// While waiting it polls jobs/request every cfg.PollInterval, sending
// back X-GitLab-Last-Update; it backs off on errors and ends with
// ErrRunnerForbidden on a 403 without taking a job. A ctx cancelled while
// waiting ends it with ctx's cause, and no job is taken.
//
// Once it has a job it runs the job's steps, streams the trace, and PUTs
// success, or failed with script_failure and the exit code, or
// job_execution_timeout when the job's timeout (bounded by
// cfg.MaxJobDuration) passes. A ctx cancelled while the job runs (give it
// a cause with context.WithCancelCause) stops the job and reports it
// runner_interrupted if the cause wraps ErrInterrupted (unknown_failure
// where GitLab does not list that reason), else runner_system_failure;
// never a script failure,
// within cfg.AbortGrace plus cfg.FinalUpdateTimeout on clk; RunOne then returns
// the Failed state and an error wrapping the cause.
func RunOne(ctx context.Context, cfg Config, exec Executor, clk clock.Clock, log logr.Logger, onState func(State)) (State, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return State{}, err
	}
	if exec == nil {
		return State{}, fmt.Errorf("%w: no executor", ErrInvalidConfig)
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	client, err := gitlab.New(cfg.URL, gitlab.Options{CABundle: cfg.CABundle, AllowHTTP: cfg.AllowHTTP, UserAgent: "macrack-jobloop"})
	if err != nil {
		return State{}, err
	}
	// GitLab shows the executor's name on the runner's page.
	executor := "custom"
	if _, ok := exec.(SimExecutor); ok {
		executor = "macrack-sim"
	}
	l := &loop{
		cfg: cfg, client: client, exec: exec, clk: clk,
		log: log.WithValues("systemID", cfg.SystemID), onState: onState, info: runnerInfo(executor),
	}
	l.set(State{Phase: PhaseWaiting})
	l.log.Info("Waiting for a job", "tags", cfg.Tags)
	job, err := l.wait(ctx)
	if err != nil {
		return l.state.clone(), err
	}
	return l.run(ctx, job)
}

// loop is one RunOne.
type loop struct {
	cfg     Config
	client  *gitlab.Client
	exec    Executor
	clk     clock.Clock
	log     logr.Logger
	onState func(State)
	info    gitlab.RunnerInfo
	state   State
}

// set records the state and tells the observer.
func (l *loop) set(s State) {
	l.state = s.clone()
	if l.onState != nil {
		l.onState(s.clone())
	}
}

// sleep waits d on the clock; false if ctx ended first.
func (l *loop) sleep(ctx context.Context, d time.Duration) bool {
	t := l.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// wait polls for a job.
func (l *loop) wait(ctx context.Context) (*gitlab.JobResponse, error) {
	start := l.clk.Now()
	lastUpdate := ""
	failures := 0
	for {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for a job: %w", context.Cause(ctx))
		}
		left := l.cfg.WaitTimeout - l.clk.Since(start)
		if l.cfg.WaitTimeout > 0 && left <= 0 {
			return nil, fmt.Errorf("waiting %s: %w", l.cfg.WaitTimeout, ErrNoJob)
		}
		job, lu, err := l.client.RequestJob(ctx, l.cfg.Token, l.cfg.SystemID, l.info, lastUpdate)
		lastUpdate = lu
		delay := l.cfg.PollInterval
		switch {
		case job != nil:
			return job, nil
		case err == nil:
			failures = 0
		case ctx.Err() != nil:
			return nil, fmt.Errorf("waiting for a job: %w", context.Cause(ctx))
		case errors.Is(err, gitlab.ErrForbidden):
			return nil, fmt.Errorf("%w: %w", ErrRunnerForbidden, err)
		case permanent(err):
			return nil, fmt.Errorf("requesting a job: %w", err)
		default:
			failures++
			delay = min(l.cfg.PollInterval<<min(failures, 6), maxBackoff)
			l.log.Info("Requesting a job failed, retrying", "error", err.Error(), "retryIn", delay.String())
		}
		if l.cfg.WaitTimeout > 0 {
			delay = min(delay, left)
		}
		l.sleep(ctx, delay)
	}
}

// permanent says a job request failed in a way asking again cannot fix:
// a malformed job, or a 4xx other than a conflict, a rate limit or a
// request timeout.
func permanent(err error) bool {
	if errors.Is(err, gitlab.ErrBadResponse) || errors.Is(err, gitlab.ErrInvalidConfig) {
		return true
	}
	var se *gitlab.StatusError
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code {
	case http.StatusConflict, http.StatusTooManyRequests, http.StatusRequestTimeout:
		return false
	}
	return se.Code >= 400 && se.Code < 500
}

// execResult is what the executor returned.
type execResult struct {
	code int
	err  error
}

// run runs the job taken and reports it.
func (l *loop) run(ctx context.Context, job *gitlab.JobResponse) (State, error) {
	log := l.log.WithValues("jobID", job.ID)
	st := State{Phase: PhaseRunning, JobID: job.ID, StartedAt: l.clk.Now()}
	queued := int64(job.JobInfo.TimeInQueueSeconds)
	st.QueuedSeconds = &queued
	l.set(st)
	timeout := l.cfg.jobTimeout(job.RunnerInfo.Timeout)
	log.Info("Running job", "jobName", job.JobInfo.Name, "timeout", timeout.String())

	tr := newTrace(traceLimit, secretsOf(job, l.cfg.Token)...)
	fmt.Fprintf(tr, "Running with macrack jobloop, system ID: %s\n", l.cfg.SystemID)
	s := &streamer{client: l.client, clk: l.clk, job: job, tr: tr, interval: l.cfg.TraceInterval, touched: st.StartedAt}

	jobCtx, cancelJob := context.WithCancelCause(ctx)
	defer cancelJob(nil)
	done := make(chan execResult, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- execResult{code: -1, err: fmt.Errorf("executor panicked: %v", p)}
			}
		}()
		code, err := l.exec.Run(jobCtx, jobOf(job, timeout), tr)
		done <- execResult{code, err}
	}()

	deadline := l.clk.NewTimer(timeout)
	defer deadline.Stop()
	tick := l.clk.NewTimer(s.interval)
	defer tick.Stop()
	var graceC <-chan time.Time
	cancelled := jobCtx.Done()
	var res execResult
	stopped := false // the job was cancelled before the executor returned
	for running := true; running; {
		select {
		case res = <-done:
			running = false
			stopped = jobCtx.Err() != nil
		case <-deadline.C():
			cancelJob(errJobTimeout)
		case <-cancelled:
			cancelled = nil
			grace := l.clk.NewTimer(l.cfg.AbortGrace)
			defer grace.Stop()
			graceC = grace.C()
		case <-graceC:
			res, running, stopped = execResult{code: -1, err: errExecutorHung}, false, true
		case <-tick.C():
			err := s.flush(ctx, false)
			if err == nil {
				err = s.keepAlive(ctx, l.info, l.cfg.KeepAliveInterval)
			}
			if errors.Is(err, ErrJobCanceled) {
				cancelJob(ErrJobCanceled)
			} else if err != nil && ctx.Err() == nil {
				log.Info("Sending the trace failed, will retry", "error", err.Error())
			}
			tick.Reset(s.interval)
		}
	}

	upd := gitlab.JobUpdate{Info: l.info, State: gitlab.StateFailed}
	var final string
	var outcome error
	var reason gitlab.FailureReason // the runner's own, when GitLab may not know it
	cause := context.Cause(jobCtx)
	switch {
	case stopped && ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrInterrupted):
		reason = gitlab.FailureRunnerInterrupted
		final = "ERROR: Job failed: aborted: " + context.Cause(ctx).Error()
		outcome = fmt.Errorf("job %d aborted: %w", job.ID, context.Cause(ctx))
	case stopped && ctx.Err() != nil:
		upd.FailureReason = gitlab.FailureRunnerSystem
		final = "ERROR: Job failed (system failure): aborted: " + context.Cause(ctx).Error()
		outcome = fmt.Errorf("job %d aborted: %w", job.ID, context.Cause(ctx))
	case stopped && errors.Is(cause, ErrJobCanceled):
		final = "ERROR: Job failed: canceled"
		outcome = fmt.Errorf("job %d: %w", job.ID, ErrJobCanceled)
	case stopped && errors.Is(cause, errJobTimeout):
		upd.FailureReason = gitlab.FailureJobExecutionTimeout
		final = fmt.Sprintf("ERROR: Job failed: execution took longer than %s seconds", timeout)
	case res.err != nil:
		upd.FailureReason = gitlab.FailureRunnerSystem
		final = "ERROR: Job failed (system failure): " + gitlab.Redact(res.err.Error(), secretsOf(job, l.cfg.Token)...)
	case res.code != 0:
		upd.FailureReason = gitlab.FailureScript
		upd.ExitCode = res.code
		final = fmt.Sprintf("ERROR: Job failed: exit code %d", res.code)
	default:
		upd.State = gitlab.StateSuccess
		final = "Job succeeded"
	}
	if reason != "" {
		upd.FailureReason = supportedReason(job.Features.FailureReasons, reason)
	}
	tr.finish(final)

	st.FinishedAt = l.clk.Now()
	st.Phase = PhaseFailed
	if upd.State == gitlab.StateSuccess {
		st.Phase = PhaseSucceeded
	}
	st.FailureReason = string(cmp.Or(reason, upd.FailureReason))
	if errors.Is(outcome, ErrJobCanceled) {
		st.FailureReason = FailureJobCanceled
	}
	if upd.FailureReason == gitlab.FailureScript || upd.State == gitlab.StateSuccess {
		code := int32(res.code)
		st.ExitCode = &code
	}

	fctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	// Once ctx ends the VM is going away: report within FinalUpdateTimeout.
	defer context.AfterFunc(ctx, func() {
		t := l.clk.NewTimer(l.cfg.FinalUpdateTimeout)
		defer t.Stop()
		select {
		case <-t.C():
			cancel(errFinalUpdateTimeout)
		case <-fctx.Done():
		}
	})()
	err := l.finalUpdate(fctx, s, upd)
	if err != nil && errors.Is(outcome, ErrJobCanceled) && errors.Is(err, ErrJobCanceled) {
		err = nil // GitLab already knows: it cancelled the job.
	}
	l.set(st)
	log.Info("Job finished", "phase", st.Phase, "failureReason", st.FailureReason, "exitCode", res.code)
	return l.state.clone(), errors.Join(outcome, err)
}

// alwaysSupported are the failure reasons every GitLab takes
// (gitlab-runner's alwaysSupportedFailureReasons, common/network.go).
var alwaysSupported = []gitlab.FailureReason{gitlab.FailureScript, gitlab.FailureRunnerSystem, gitlab.FailureJobExecutionTimeout}

// supportedReason is gitlab-runner's failureReasonMapper: reason if GitLab
// lists it in the job's features.failure_reasons or takes it always, else
// unknown_failure (no reason the loop sends has an older equivalent).
func supportedReason(listed []gitlab.FailureReason, reason gitlab.FailureReason) gitlab.FailureReason {
	if slices.Contains(listed, reason) || slices.Contains(alwaysSupported, reason) {
		return reason
	}
	return gitlab.FailureUnknown
}

// finalUpdate sends the rest of the trace and the final state, as
// gitlab-runner's finishWithFinalUpdate does: up to cfg.FinalUpdateRetries
// tries, waiting finalUpdateBackoff between them. It gives up at once when
// GitLab no longer lets the runner work on the job (wrapping
// ErrJobCanceled), on another 4xx, or when ctx ends.
func (l *loop) finalUpdate(ctx context.Context, s *streamer, upd gitlab.JobUpdate) error {
	for try := 1; ; try++ {
		err := l.sendFinal(ctx, s, upd)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrJobCanceled):
			return fmt.Errorf("%w: %w", ErrFinalUpdate, err)
		case ctx.Err() != nil:
			return fmt.Errorf("%w: %w: %w", ErrFinalUpdate, context.Cause(ctx), err)
		case permanent(err):
			return fmt.Errorf("%w: %w", ErrFinalUpdate, err)
		case try >= l.cfg.FinalUpdateRetries:
			return fmt.Errorf("%w after %d tries: %w", ErrFinalUpdate, try, err)
		}
		wait := finalUpdateBackoff(try, l.cfg.FinalUpdateBackoffMax)
		l.log.Info("Sending the job's final state failed, retrying", "jobID", s.job.ID, "error", err.Error(), "retryIn", wait.String())
		if !l.sleep(ctx, wait) {
			return fmt.Errorf("%w: %w: %w", ErrFinalUpdate, context.Cause(ctx), err)
		}
	}
}

// finalUpdateBackoff is the wait after the given failed try: 1 s doubling,
// capped at max, as gitlab-runner's retry backoff (jpillora/backoff with
// Min 1 s, Factor 2) waits.
func finalUpdateBackoff(try int, max time.Duration) time.Duration {
	if try < 1 {
		try = 1
	}
	if try > 40 { // past any cap, and before the shift overflows
		return max
	}
	return min(time.Second<<(try-1), max)
}

// sendFinal is one try, gitlab-runner's finalUpdate: send the rest of the
// trace, then the state; again after GitLab's interval on a 202, and from
// offset 0 on a 412 (gitlab-runner too drops back to its default interval
// here, rather than GitLab's 60 s for an unwatched job). It fails on any
// other error.
func (l *loop) sendFinal(ctx context.Context, s *streamer, upd gitlab.JobUpdate) error {
	for {
		if err := s.flush(ctx, true); err != nil {
			return err
		}
		upd.Output = s.tr.output()
		res, err := l.client.UpdateJob(ctx, s.job.ID, s.job.Token, upd)
		wait := l.cfg.TraceInterval
		switch {
		case err == nil && !res.Accepted:
			return nil
		case err == nil:
			if res.UpdateInterval > 0 {
				wait = res.UpdateInterval
			}
		case errors.Is(err, gitlab.ErrTraceValidation):
			s.sent = 0
		case errors.Is(err, gitlab.ErrForbidden) || errors.Is(err, gitlab.ErrNotFound):
			return fmt.Errorf("%w: %w", ErrJobCanceled, err)
		default:
			return err
		}
		if !l.sleep(ctx, wait) {
			return fmt.Errorf("GitLab accepted the final state but had not applied it: %w", context.Cause(ctx))
		}
	}
}

// streamer sends a job's trace incrementally, and keeps the job alive.
type streamer struct {
	client   *gitlab.Client
	clk      clock.PassiveClock
	job      *gitlab.JobResponse
	tr       *traceBuffer
	sent     int64
	interval time.Duration
	// touched is when GitLab last took a patch or an update of the job.
	touched time.Time
}

// flush sends what is not sent yet, following GitLab's offset after a
// 416. With all it fails unless everything was sent. It wraps
// ErrJobCanceled when GitLab no longer lets the runner work on the job.
func (s *streamer) flush(ctx context.Context, all bool) error {
	for range maxPatchTries {
		chunk := s.tr.chunk(s.sent, tracePatchLimit)
		if len(chunk) == 0 {
			return nil
		}
		res, err := s.client.PatchTrace(ctx, s.job.ID, s.job.Token, chunk, s.sent)
		var rm *gitlab.RangeMismatchError
		switch {
		case errors.As(err, &rm):
			s.sent = min(rm.Offset, s.tr.size())
			continue
		case errors.Is(err, gitlab.ErrForbidden) || errors.Is(err, gitlab.ErrNotFound):
			return fmt.Errorf("%w: %w", ErrJobCanceled, err)
		case err != nil:
			return err
		}
		s.sent = res.Offset
		s.touched = s.clk.Now()
		if res.UpdateInterval > 0 {
			s.interval = res.UpdateInterval
		}
		switch res.JobStatus {
		case gitlab.StateCanceling, gitlab.StateCanceled, gitlab.StateFailed:
			return fmt.Errorf("%w: GitLab says the job is %s", ErrJobCanceled, res.JobStatus)
		}
	}
	if all && s.sent < s.tr.size() {
		return fmt.Errorf("trace not all sent after %d patches", maxPatchTries)
	}
	return nil
}

// keepAlive touches the job with a running update when nothing reached
// GitLab for longer than every, as gitlab-runner's touchJob does after
// each incremental update: GitLab fails a job untouched for an hour, and
// the answer is also how a silent job learns it was cancelled. It wraps
// ErrJobCanceled when GitLab no longer lets the runner work on the job.
func (s *streamer) keepAlive(ctx context.Context, info gitlab.RunnerInfo, every time.Duration) error {
	if s.clk.Since(s.touched) <= every {
		return nil
	}
	res, err := s.client.UpdateJob(ctx, s.job.ID, s.job.Token, gitlab.JobUpdate{
		Info: info, State: gitlab.StateRunning, Output: s.tr.output(),
	})
	switch {
	case errors.Is(err, gitlab.ErrForbidden) || errors.Is(err, gitlab.ErrNotFound):
		return fmt.Errorf("%w: %w", ErrJobCanceled, err)
	case err != nil:
		return err
	}
	s.touched = s.clk.Now()
	if res.UpdateInterval > 0 {
		s.interval = res.UpdateInterval
	}
	switch res.JobStatus {
	case gitlab.StateCanceling, gitlab.StateCanceled, gitlab.StateFailed:
		return fmt.Errorf("%w: GitLab says the job is %s", ErrJobCanceled, res.JobStatus)
	}
	return nil
}

// secretsOf lists what must never reach the trace or the log.
func secretsOf(job *gitlab.JobResponse, runnerToken string) []string {
	out := []string{runnerToken, job.Token}
	for _, v := range job.Variables {
		if v.Masked {
			out = append(out, v.Value)
		}
	}
	for _, d := range job.Dependencies {
		out = append(out, d.Token)
	}
	for _, c := range job.Credentials {
		out = append(out, c.Password)
	}
	return out
}
