package instances

import "errors"

// Sentinel errors of the host agent.
var (
	// ErrNoSlot means no slot of this chassis names the instance, so its VM
	// must not run.
	ErrNoSlot = errors.New("no slot names the instance")
)
