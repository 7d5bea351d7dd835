package instances

import "errors"

// Sentinel errors of the host agent.
var (
	// ErrNoSlot means no slot of this chassis names the instance, so its VM
	// must not run.
	ErrNoSlot = errors.New("no slot names the instance")
	// ErrNoRebooter means the agent has no way to reboot its host: the
	// chassis stays quarantined until a person reboots it.
	ErrNoRebooter = errors.New("no rebooter configured")
	// ErrVMsRunning means a quota probe was refused because a VM runs: the
	// probe must never be a third VM.
	ErrVMsRunning = errors.New("VMs run on the chassis")
	// ErrNoProbeGolden means the image cache holds no Ready golden for the
	// probe VM to boot from.
	ErrNoProbeGolden = errors.New("no Ready golden in the image cache for the quota probe VM")
	// ErrNoGuestKey means an agent built without a guest key: it opens no
	// sealed guest config.
	ErrNoGuestKey = errors.New("this agent has no guest key")
)
