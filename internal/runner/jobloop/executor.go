package jobloop

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// Executor runs a job. It writes the job's output to out and returns the
// job's exit code: 0 for success, else the failing script's. An error
// means the executor itself failed (runner_system_failure), not the
// script. It must return soon after ctx ends: that is how the loop stops
// a job that timed out, was cancelled, or whose VM is going away.
type Executor interface {
	Run(ctx context.Context, job Job, out io.Writer) (exitCode int, err error)
}

// Job is what an Executor runs. It has no job token of its own; the token
// is among the variables (CI_JOB_TOKEN), masked, as GitLab sends it.
type Job struct {
	ID        int64
	Name      string
	Stage     string
	ProjectID int64
	// Steps are GitLab's steps: script, then after_script, in order.
	Steps     []gitlab.Step
	Variables []gitlab.Variable
	// Timeout is the job's timeout; the loop enforces it.
	Timeout time.Duration
}

// String names the job without its variables.
func (j Job) String() string { return fmt.Sprintf("job %d (%s)", j.ID, j.Name) }

// GoString is String, so that %#v hides the variables too.
func (j Job) GoString() string { return j.String() }

// jobOf is the Executor's view of a job from GitLab.
func jobOf(r *gitlab.JobResponse, timeout time.Duration) Job {
	return Job{
		ID:        r.ID,
		Name:      r.JobInfo.Name,
		Stage:     r.JobInfo.Stage,
		ProjectID: r.JobInfo.ProjectID,
		Steps:     r.Steps,
		Variables: r.Variables,
		Timeout:   timeout,
	}
}

// ScriptRunner runs one step's script and returns its exit code.
type ScriptRunner func(ctx context.Context, step gitlab.Step, out io.Writer) (exitCode int, err error)

// RunSteps runs a job's steps with run, as gitlab-runner orders them: a
// step runs if its when allows after how the steps before went
// (on_success, the default, only while all passed; on_failure only after
// a failure; always either way). A failing step that allows failure, such
// as after_script, does not fail the job. The job's exit code is the first
// failing step's. Once ctx ends no further step runs.
func RunSteps(ctx context.Context, job Job, out io.Writer, run ScriptRunner) (int, error) {
	code := 0
	for _, st := range job.Steps {
		if (code == 0 && !st.When.OnSuccess()) || (code != 0 && !st.When.OnFailure()) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return code, err
		}
		if st.Name != gitlab.StepScript {
			fmt.Fprintf(out, "Running %s\n", st.Name)
		}
		c, err := run(ctx, st, out)
		switch {
		case err != nil:
			return c, err
		case c != 0 && st.AllowFailure:
			fmt.Fprintf(out, "WARNING: %s failed, but job will continue unaffected: exit code %d\n", st.Name, c)
		case c != 0 && code == 0:
			code = c
		}
	}
	return code, nil
}
