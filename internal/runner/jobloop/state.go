package jobloop

import "time"

// Phase is where the loop is.
type Phase string

// Phases. Succeeded and Failed are final.
const (
	PhaseWaiting   Phase = "Waiting"
	PhaseRunning   Phase = "Running"
	PhaseSucceeded Phase = "Succeeded"
	PhaseFailed    Phase = "Failed"
)

// State is what the loop reports of its job, for the guest agent to pass
// on to the operator. It holds no token.
type State struct {
	Phase Phase `json:"phase"`
	// JobID is GitLab's id of the job taken; 0 while waiting.
	JobID      int64     `json:"jobID,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// FailureReason is the runner's failure reason, such as
	// script_failure, job_execution_timeout, runner_system_failure or
	// runner_interrupted (sent as unknown_failure to a GitLab that does
	// not list it); or job_canceled when GitLab cancelled the job
	// (nothing is sent then).
	FailureReason string `json:"failureReason,omitempty"`
	// ExitCode is the script's exit code when it ran to one.
	ExitCode *int32 `json:"exitCode,omitempty"`
	// QueuedSeconds is how long the job waited in GitLab's queue.
	QueuedSeconds *int64 `json:"queuedSeconds,omitempty"`
}

// FailureJobCanceled is the FailureReason of a job GitLab cancelled, the
// name gitlab-runner gives it internally (common/network.go JobCanceled);
// GitLab has no such failure_reason and is never sent it.
const FailureJobCanceled = "job_canceled"

// clone copies s, pointers included, so an observer cannot change the
// loop's own state.
func (s State) clone() State {
	if s.ExitCode != nil {
		v := *s.ExitCode
		s.ExitCode = &v
	}
	if s.QueuedSeconds != nil {
		v := *s.QueuedSeconds
		s.QueuedSeconds = &v
	}
	return s
}
