package custom

import "errors"

// Sentinel errors. Callers match them with errors.Is.
var (
	// ErrInvalidOptions means Options or ServerOptions that cannot work.
	ErrInvalidOptions = errors.New("invalid custom executor options")
	// ErrUsage means the stage binary was called with arguments or an
	// environment gitlab-runner does not give it.
	ErrUsage = errors.New("macrack-runner-stage: bad usage")
	// ErrUnreachable means the stage could not talk to the agent's socket,
	// or the agent could not reach the VM.
	ErrUnreachable = errors.New("the job's VM is unreachable")
	// ErrSystemID means the chassis's .runner_system_id could not be
	// read or written.
	ErrSystemID = errors.New("runner system id")
)
