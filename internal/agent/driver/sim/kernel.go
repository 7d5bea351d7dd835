package sim

import (
	"fmt"
	"sync"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
)

// QuotaLimit is the kernel's hv_apple_isa_vm_quota: at most two macOS VMs
// run on one host. It is a constant on purpose; nothing raises it.
const QuotaLimit = 2

// Slot is one VM's hold on the quota, from Acquire to Release.
type Slot uint64

// Kernel models the host kernel's VM quota: a host-wide counter with limit
// QuotaLimit, shared by every VM on the host whatever process runs it.
type Kernel interface {
	// Acquire counts one more VM for owner, or fails with the code-6
	// VZError when QuotaLimit VMs are already counted.
	Acquire(owner string) (Slot, error)
	// Release uncounts slot. With the stuck-quota fault on, the slot stays
	// counted, as in the field bug, until Reboot. Releasing a slot the
	// kernel no longer counts (after a Reboot) does nothing.
	Release(slot Slot) error
	// Active is how many VMs the counter holds, stuck ones included.
	Active() (int, error)
	// SetStuckQuota turns the stuck-quota fault on or off.
	SetStuckQuota(stuck bool) error
	// Reboot models a host reboot: every VM is gone and the counter is
	// zero. The fault switch stays as it is: the bug may come back.
	Reboot() error
	// StickSlots reproduces the field bug once, without the fault switch:
	// up to n slots that no VM holds are counted, stuck, as if VMs had
	// stopped and the kernel had not let go of them. It never counts past
	// QuotaLimit, and returns how many it added. Only Reboot clears them.
	StickSlots(n int) (int, error)
	// MaxActive is the most VMs the counter ever held at once, stuck
	// slots aside: the evidence that no third VM ever existed.
	MaxActive() (int, error)
}

// live counts the slots a VM holds, stuck ones aside.
func live(stuck []bool) int {
	n := 0
	for _, s := range stuck {
		if !s {
			n++
		}
	}
	return n
}

// limitExceeded is what Virtualization.framework answers a start over the quota.
func limitExceeded(active int) error {
	return &driver.VZError{
		Domain:  driver.DomainVZ,
		Code:    driver.CodeVirtualMachineLimitExceeded,
		Message: fmt.Sprintf("The maximum supported number of active virtual machines has been reached (%d of %d).", active, QuotaLimit),
	}
}

// MemKernel is a Kernel in memory, for one simulated host whose VMs all run
// in this process (the in-process scale mode and fast tests).
type MemKernel struct {
	mu        sync.Mutex
	next      Slot
	slots     map[Slot]bool // slot -> stuck
	stuck     bool
	maxActive int
}

var _ Kernel = (*MemKernel)(nil)

// NewMemKernel returns a freshly booted in-memory kernel.
func NewMemKernel() *MemKernel {
	return &MemKernel{slots: map[Slot]bool{}}
}

// Acquire implements Kernel.
func (k *MemKernel) Acquire(string) (Slot, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n := len(k.slots); n >= QuotaLimit {
		return 0, limitExceeded(n)
	}
	k.next++
	k.slots[k.next] = false
	stuck := make([]bool, 0, len(k.slots))
	for _, s := range k.slots {
		stuck = append(stuck, s)
	}
	k.maxActive = max(k.maxActive, live(stuck))
	return k.next, nil
}

// Release implements Kernel.
func (k *MemKernel) Release(slot Slot) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.slots[slot]; !ok {
		return nil
	}
	if k.stuck {
		k.slots[slot] = true
		return nil
	}
	delete(k.slots, slot)
	return nil
}

// Active implements Kernel.
func (k *MemKernel) Active() (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.slots), nil
}

// SetStuckQuota implements Kernel.
func (k *MemKernel) SetStuckQuota(stuck bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stuck = stuck
	return nil
}

// Reboot implements Kernel.
func (k *MemKernel) Reboot() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	clear(k.slots)
	return nil
}

// StickSlots implements Kernel.
func (k *MemKernel) StickSlots(n int) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	added := 0
	for ; added < n && len(k.slots) < QuotaLimit; added++ {
		k.next++
		k.slots[k.next] = true
	}
	return added, nil
}

// MaxActive implements Kernel.
func (k *MemKernel) MaxActive() (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.maxActive, nil
}
