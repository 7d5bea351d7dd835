package agent

import "errors"

// Sentinel errors of the host agent.
var (
	// ErrNotEnrolled means no MacNode exists for this chassis: run
	// `macrackctl node enroll` first.
	ErrNotEnrolled = errors.New("chassis not enrolled")
	// ErrNoSlot means no slot of this chassis names the instance, so its VM
	// must not run.
	ErrNoSlot = errors.New("no slot names the instance")
	// ErrConfig means the agent's own settings are unusable.
	ErrConfig = errors.New("invalid agent configuration")
)
