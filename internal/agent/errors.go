package agent

import "errors"

// Sentinel errors of the host agent.
var (
	// ErrConfig means the agent's own settings are unusable.
	ErrConfig = errors.New("invalid agent configuration")
)
