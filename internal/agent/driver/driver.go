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
