package agent

import "errors"

// Sentinel errors of the host agent.
var (
	// ErrConfig means the agent's own settings are unusable.
	ErrConfig = errors.New("invalid agent configuration")
	// ErrHostRebooted is Run's return when the agent rebooted its host to
	// clear a stuck kernel VM quota: its supervisor starts it again once
	// the host is back (cmd/agent in the sim: after --sim-reboot-time).
	ErrHostRebooted = errors.New("the host agent rebooted its host")
)
