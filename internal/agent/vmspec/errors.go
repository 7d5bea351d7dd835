package vmspec

import "errors"

// Sentinel errors. Render and Validate wrap them with the offending value;
// callers match them with errors.Is.
var (
	// ErrMissingObject means the instance or the image is nil.
	ErrMissingObject = errors.New("instance or image missing")
	// ErrImageMismatch means the image is not the one the instance names.
	ErrImageMismatch = errors.New("image is not the instance's")
	// ErrName means the VM has no name or no instance UID.
	ErrName = errors.New("invalid VM name or UID")
	// ErrCPU means the CPU count is out of range.
	ErrCPU = errors.New("invalid CPU count")
	// ErrMemory means the memory size is too small or not whole MiB.
	ErrMemory = errors.New("invalid memory size")
	// ErrDisk means the disk size is not positive or smaller than the image.
	ErrDisk = errors.New("invalid disk size")
	// ErrHardwareModel means the image's hardware model is missing or not base64.
	ErrHardwareModel = errors.New("invalid hardware model")
	// ErrImageUnresolved means the operator has not resolved the image's
	// artifact yet: its minimum disk and hardware model are unknown.
	ErrImageUnresolved = errors.New("image not resolved")
	// ErrMachineIdentifier means the machine identifier is missing.
	ErrMachineIdentifier = errors.New("invalid machine identifier")
	// ErrPath means a file path is missing or not absolute.
	ErrPath = errors.New("invalid path")
	// ErrMACAddress means the MAC address is not a unicast, locally administered one.
	ErrMACAddress = errors.New("invalid MAC address")
	// ErrDevice means an unknown boot loader or network, or a bad display.
	ErrDevice = errors.New("invalid device")
)
