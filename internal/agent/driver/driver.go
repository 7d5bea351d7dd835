// Package driver is the interface the vm-helper drives: one VM, started and
// stopped in the helper's process, with a byte stream to the guest. The sim
// driver implements it on any OS; the vz driver on a Mac.
package driver

import (
	"context"
	"net"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// State is a VM's execution state.
type State string

// The states. A failed start leaves a VM Stopped; Error is the hypervisor's
// own "internal error" state.
const (
	StateStopped  State = "Stopped"
	StateStarting State = "Starting"
	StateRunning  State = "Running"
	StateStopping State = "Stopping"
	// StatePaused covers the framework's pause, resume, save and restore
	// states, which MacRack never asks for.
	StatePaused State = "Paused"
	StateError  State = "Error"
)

// VM is one virtual machine. Its methods are safe for concurrent use.
type VM interface {
	// Start boots the VM and returns once it runs. A VM can be started
	// again after it stopped.
	Start(ctx context.Context) error
	// Stop asks the guest to shut down, waits up to graceful, then forces
	// the VM off. Stopping a stopped VM does nothing.
	Stop(ctx context.Context, graceful time.Duration) error
	// State is the VM's current state.
	State() State
	// DialGuest connects to a vsock port the guest listens on.
	DialGuest(ctx context.Context, port uint32) (net.Conn, error)
}

// Driver makes VMs.
type Driver interface {
	// NewVM checks spec and builds its VM, stopped.
	NewVM(spec vmspec.VMSpec) (VM, error)
}

// StopMethod is how a VM went down, gentlest first. The values are the
// MacOSInstance API's status.runtime.lastStop.method.
type StopMethod string

// The stop methods.
const (
	// StopGuestShutdown: the guest shut itself down (its guest agent was
	// asked to, and macOS powered off).
	StopGuestShutdown StopMethod = "GuestShutdown"
	// StopRequestStop: the framework's requestStop (the power button)
	// brought the guest down within the grace period.
	StopRequestStop StopMethod = "RequestStop"
	// StopForced: the VM was forced off; its disk may not be consistent.
	StopForced StopMethod = "Forced"
)

// StopReporter is a VM that can say how its last stop went: the helper
// tells the agent, which records it on the instance. A VM that is not one
// is judged by how long its Stop took.
type StopReporter interface {
	// LastStopMethod is how the VM last went down; empty if it never ran
	// and stopped.
	LastStopMethod() StopMethod
}
