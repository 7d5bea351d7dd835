package jobloop

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/guest"
)

// Failure reasons a guest reports for a loop that ended without a job;
// the workload's controller reads them (GitLab never sees them).
const (
	// FailureTokenRejected: GitLab refused the runner token.
	FailureTokenRejected = "runner_token_rejected"
	// FailureNoJob: the loop ended without a job for another reason.
	FailureNoJob = "no_job"
)

// RunFunc runs the one job: RunOne with an executor in the simulator,
// custom.RunFunc on a Mac.
type RunFunc func(ctx context.Context, cfg Config, onState func(State)) (State, error)

// Workload is the guest agent's guest.Workload for a GitLab runner: it
// takes one configuration, runs one job, and reports it. Stop reports a
// job under way as a system failure before the VM powers off.
type Workload struct {
	// parent ends with the VM's boot: the loop ends with it.
	parent context.Context
	run    RunFunc
	log    logr.Logger

	config guest.OneConfig

	mu     sync.Mutex
	state  *State
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// NewWorkload returns a Workload that runs run once configured, until
// parent (the VM's boot) ends.
func NewWorkload(parent context.Context, run RunFunc, log logr.Logger) *Workload {
	return &Workload{parent: parent, run: run, log: log}
}

// NewSimWorkload runs the job's scripts in the simulator (SimExecutor),
// asking GitLab for a job every poll (DefaultPollInterval if zero).
func NewSimWorkload(vmCtx context.Context, clk clock.Clock, poll time.Duration, log logr.Logger) *Workload {
	return NewWorkload(vmCtx, func(ctx context.Context, cfg Config, onState func(State)) (State, error) {
		cfg.PollInterval = poll
		return RunOne(ctx, cfg, SimExecutor{Clock: clk}, clk, log, onState)
	}, log)
}

// Configure implements guest.Workload: the first runner configuration
// starts the loop; the same one again changes nothing; another is refused.
func (w *Workload) Configure(_ context.Context, c guest.Config) error {
	if c.Runner == nil {
		return fmt.Errorf("%w: the configuration holds no runner", ErrInvalidConfig)
	}
	first, err := w.config.Set(c)
	if err != nil || !first {
		return err
	}
	r := c.Runner
	cfg := Config{
		URL: r.URL, Token: r.Token, SystemID: r.SystemID, CABundle: []byte(r.CABundle),
		Tags: r.Tags, MaxJobDuration: time.Duration(r.MaxJobDuration),
	}
	ctx, cancel := context.WithCancelCause(w.parent)
	done := make(chan struct{})
	w.mu.Lock()
	w.state, w.cancel, w.done = &State{Phase: PhaseWaiting}, cancel, done
	w.mu.Unlock()
	go func() {
		defer close(done)
		st, err := w.run(ctx, cfg, w.observe)
		if st.Phase == "" || st.Phase == PhaseWaiting {
			// The loop ended without a job: say so, and why, so that the
			// VM is replaced rather than left waiting.
			st = State{Phase: PhaseFailed, FailureReason: FailureNoJob}
			if errors.Is(err, ErrRunnerForbidden) {
				st.FailureReason = FailureTokenRejected
			}
		}
		w.observe(st)
		if err != nil {
			w.log.Info("Job loop ended", "phase", st.Phase, "jobID", st.JobID, "error", err.Error())
		}
	}()
	return nil
}

func (w *Workload) observe(st State) {
	st = st.clone()
	w.mu.Lock()
	w.state = &st
	w.mu.Unlock()
}

// Status implements guest.Workload.
func (w *Workload) Status() (bool, *guest.JobReport) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == nil {
		return false, nil
	}
	return true, report(*w.state)
}

// report turns the loop's state into the protocol's job report.
func report(st State) *guest.JobReport {
	r := &guest.JobReport{Phase: guest.JobPhase(st.Phase), ID: st.JobID, FailureReason: st.FailureReason}
	if !st.StartedAt.IsZero() {
		t := st.StartedAt
		r.StartedAt = &t
	}
	if !st.FinishedAt.IsZero() {
		t := st.FinishedAt
		r.FinishedAt = &t
	}
	if st.ExitCode != nil {
		v := *st.ExitCode
		r.ExitCode = &v
	}
	if st.QueuedSeconds != nil {
		v := *st.QueuedSeconds
		r.QueuedSeconds = &v
	}
	return r
}

// Stop implements guest.Workload: the loop is cancelled with
// ErrSystemShutdown, so a job under way is reported to GitLab as
// runner_system_failure; it returns when the loop has, or when ctx ends.
func (w *Workload) Stop(ctx context.Context) error {
	return w.stop(ctx, ErrSystemShutdown)
}

// Interrupt is Stop for a healthy runner told to stop (its VM deleted, the
// runner scaled down): a job under way is reported runner_interrupted.
func (w *Workload) Interrupt(ctx context.Context) error {
	return w.stop(ctx, ErrInterrupted)
}

func (w *Workload) stop(ctx context.Context, cause error) error {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel(cause)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the job loop to report: %w", context.Cause(ctx))
	}
}

var _ guest.Workload = (*Workload)(nil)
