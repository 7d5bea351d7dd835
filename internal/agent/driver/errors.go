package driver

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers match them with errors.Is.
var (
	// ErrNotRunning means the operation needs a running VM.
	ErrNotRunning = errors.New("VM is not running")
	// ErrNoVsock means the VM has no socket device to dial the guest through.
	ErrNoVsock = errors.New("VM has no vsock device")
)

// DomainVZ is Virtualization.framework's NSError domain.
const DomainVZ = "VZErrorDomain"

// Virtualization.framework's VZErrorCode values that MacRack tells apart,
// matching vz.ErrorCode.
const (
	CodeInternal                             = 1
	CodeInvalidVirtualMachineConfiguration   = 2
	CodeInvalidVirtualMachineState           = 3
	CodeInvalidVirtualMachineStateTransition = 4
	CodeInvalidDiskImage                     = 5
	// CodeVirtualMachineLimitExceeded: "the maximum supported number of
	// active virtual machines has been reached", the kernel's
	// hv_apple_isa_vm_quota of two per host.
	CodeVirtualMachineLimitExceeded = 6
)

// VZError is an error from Virtualization.framework (or the sim standing in
// for it). It crosses the helper socket intact.
type VZError struct {
	Domain  string
	Code    int
	Message string
}

func (e *VZError) Error() string {
	return fmt.Sprintf("%s code %d: %s", e.Domain, e.Code, e.Message)
}

// IsLimitExceeded reports whether err is the host's VM quota refusing a
// start.
func IsLimitExceeded(err error) bool {
	var vz *VZError
	return errors.As(err, &vz) && vz.Domain == DomainVZ && vz.Code == CodeVirtualMachineLimitExceeded
}
