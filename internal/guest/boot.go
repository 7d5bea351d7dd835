package guest

import (
	"fmt"
	"sync"
)

// BootStage is how far the guest has come since the VM started, as the
// guest agent sees it. The stages only move forward:
//
//	booting        the agent process is up but not yet serving
//	agent-started  the agent listens on vsock and answers reports
//	ready          the agent's start-up self-check passed (its disk path
//	               and Xcode root can be read), so reports are trustworthy
//
// The host sees "booting" only from an agent that answers before it
// finishes starting; it infers anything earlier from getting no answer.
type BootStage string

// The boot stages, in order.
const (
	BootStageBooting      BootStage = "booting"
	BootStageAgentStarted BootStage = "agent-started"
	BootStageReady        BootStage = "ready"
)

// rank orders the stages; zero means not a stage.
func (s BootStage) rank() int {
	switch s {
	case BootStageBooting:
		return 1
	case BootStageAgentStarted:
		return 2
	case BootStageReady:
		return 3
	}
	return 0
}

// BootState is the guest agent's boot stage machine, safe for concurrent
// use: the agent's start-up advances it while connections read it.
type BootState struct {
	mu    sync.Mutex
	stage BootStage
}

// NewBootState starts at BootStageBooting.
func NewBootState() *BootState {
	return &BootState{stage: BootStageBooting}
}

// Stage is the current stage.
func (b *BootState) Stage() BootStage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stage
}

// Advance moves to stage to. Staying put is allowed, so a retried start-up
// step is harmless; going back or to an unknown stage wraps ErrBadTransition.
func (b *BootState) Advance(to BootStage) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if to.rank() == 0 || to.rank() < b.stage.rank() {
		return fmt.Errorf("%w: from %q to %q", ErrBadTransition, b.stage, to)
	}
	b.stage = to
	return nil
}
