package sim

import "errors"

// Sentinel errors. Callers match them with errors.Is.
var (
	// ErrNoGuestHandler means DialGuest was called on a driver built
	// without WithGuestHandler: the sim has no guest to connect to.
	ErrNoGuestHandler = errors.New("sim driver has no guest handler")
	// ErrKernelState means the file kernel's state could not be read or written.
	ErrKernelState = errors.New("sim kernel state")
	// ErrStoppedWhileStarting means Stop ended a start before the VM ran.
	ErrStoppedWhileStarting = errors.New("VM was stopped while starting")
	// ErrNotAGuest means ShutdownGuest was given a context that is not a
	// sim guest's.
	ErrNotAGuest = errors.New("not a sim guest's context")
)
