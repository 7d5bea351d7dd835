package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// Files of a FileKernel's state directory.
const (
	// StateFile holds the counter as JSON.
	StateFile = "hv_vm_quota.json"
	// LockFile is flocked around every read-modify-write of StateFile.
	LockFile = "hv_vm_quota.lock"
	// FaultStuckQuotaFile, while it exists, turns the stuck-quota fault on;
	// `touch` it to reproduce the field bug on a running sim host.
	FaultStuckQuotaFile = "fault-stuck-quota"
)

// FileKernel is a Kernel whose counter lives in a state directory, shared
// by every vm-helper process of one simulated host, as the real counter is
// shared by every process of a real one.
//
// Each counted slot records the pid that holds it: a slot whose process has
// died is dropped, because the real kernel frees a VM with its process. A
// stuck slot has no process and stays until Reboot.
type FileKernel struct {
	dir string
	pid int
}

var _ Kernel = (*FileKernel)(nil)

// fileState is StateFile's content.
type fileState struct {
	// Next is the last slot handed out; it survives Reboot so that a slot
	// from before a reboot never matches one after it.
	Next  Slot        `json:"next"`
	Slots []slotEntry `json:"slots"`
	// MaxActive is the most slots VMs held at once, stuck ones aside. It
	// survives Reboot: it is the host's record, across boots, that no
	// third VM ever existed.
	MaxActive int `json:"maxActive,omitempty"`
}

// live counts the slots a VM holds, stuck ones aside.
func (st *fileState) live() int {
	n := 0
	for _, e := range st.Slots {
		if !e.Stuck {
			n++
		}
	}
	return n
}

type slotEntry struct {
	Slot  Slot   `json:"slot"`
	PID   int    `json:"pid,omitempty"`
	Owner string `json:"owner"`
	Stuck bool   `json:"stuck,omitempty"`
}

// NewFileKernel returns the kernel whose state is in dir, creating dir.
func NewFileKernel(dir string) (*FileKernel, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: creating %s: %w", ErrKernelState, dir, err)
	}
	return &FileKernel{dir: dir, pid: os.Getpid()}, nil
}

// Dir is the state directory.
func (k *FileKernel) Dir() string { return k.dir }

// Acquire implements Kernel.
func (k *FileKernel) Acquire(owner string) (Slot, error) {
	var slot Slot
	err := k.update(func(st *fileState) error {
		if n := len(st.Slots); n >= QuotaLimit {
			return limitExceeded(n)
		}
		st.Next++
		slot = st.Next
		st.Slots = append(st.Slots, slotEntry{Slot: slot, PID: k.pid, Owner: owner})
		st.MaxActive = max(st.MaxActive, st.live())
		return nil
	})
	return slot, err
}

// StickSlots implements Kernel. The stuck slots have no process, so they
// outlive every helper, as the field bug's do.
func (k *FileKernel) StickSlots(n int) (int, error) {
	added := 0
	err := k.update(func(st *fileState) error {
		for ; added < n && len(st.Slots) < QuotaLimit; added++ {
			st.Next++
			st.Slots = append(st.Slots, slotEntry{Slot: st.Next, Owner: "stuck", Stuck: true})
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return added, nil
}

// MaxActive implements Kernel.
func (k *FileKernel) MaxActive() (int, error) {
	var n int
	err := k.update(func(st *fileState) error { n = st.MaxActive; return nil })
	return n, err
}

// Release implements Kernel.
func (k *FileKernel) Release(slot Slot) error {
	return k.update(func(st *fileState) error {
		stuck, err := k.stuckFault()
		if err != nil {
			return err
		}
		i := slices.IndexFunc(st.Slots, func(e slotEntry) bool { return e.Slot == slot })
		switch {
		case i < 0:
		case stuck:
			st.Slots[i].Stuck, st.Slots[i].PID = true, 0
		default:
			st.Slots = slices.Delete(st.Slots, i, i+1)
		}
		return nil
	})
}

// Active implements Kernel.
func (k *FileKernel) Active() (int, error) {
	var n int
	err := k.update(func(st *fileState) error { n = len(st.Slots); return nil })
	return n, err
}

// SetStuckQuota implements Kernel by creating or removing FaultStuckQuotaFile.
func (k *FileKernel) SetStuckQuota(stuck bool) error {
	path := filepath.Join(k.dir, FaultStuckQuotaFile)
	var err error
	if stuck {
		err = os.WriteFile(path, nil, 0o600)
	} else if err = os.Remove(path); errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("%w: setting the stuck-quota fault: %w", ErrKernelState, err)
	}
	return nil
}

// Reboot implements Kernel.
func (k *FileKernel) Reboot() error {
	return k.update(func(st *fileState) error { st.Slots = nil; return nil })
}

func (k *FileKernel) stuckFault() (bool, error) {
	_, err := os.Stat(filepath.Join(k.dir, FaultStuckQuotaFile))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("%w: reading the stuck-quota fault: %w", ErrKernelState, err)
	}
}

// update runs fn on the state under the directory's flock, after dropping
// the slots of dead processes, and writes the state back unless fn fails.
func (k *FileKernel) update(fn func(*fileState) error) error {
	lock, err := os.OpenFile(filepath.Join(k.dir, LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("%w: opening lock: %w", ErrKernelState, err)
	}
	defer lock.Close() // closing releases the flock
	if err := flock(lock); err != nil {
		return fmt.Errorf("%w: locking: %w", ErrKernelState, err)
	}
	st, err := k.read()
	if err != nil {
		return err
	}
	st.Slots = slices.DeleteFunc(st.Slots, func(e slotEntry) bool { return !e.Stuck && !processAlive(e.PID) })
	if err := fn(&st); err != nil {
		return err
	}
	return k.write(st)
}

func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func (k *FileKernel) read() (fileState, error) {
	var st fileState
	b, err := os.ReadFile(filepath.Join(k.dir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("%w: reading: %w", ErrKernelState, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%w: decoding %s: %w", ErrKernelState, StateFile, err)
	}
	return st, nil
}

// write replaces StateFile through a rename, so that a helper killed
// mid-write leaves the previous state rather than half a file.
func (k *FileKernel) write(st fileState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("%w: encoding: %w", ErrKernelState, err)
	}
	tmp, err := os.CreateTemp(k.dir, "."+StateFile+".*")
	if err != nil {
		return fmt.Errorf("%w: writing: %w", ErrKernelState, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(k.dir, StateFile))
	}
	if err != nil {
		return fmt.Errorf("%w: writing: %w", ErrKernelState, err)
	}
	return nil
}

// processAlive reports whether pid still runs. EPERM means it runs under
// another user. A recycled pid keeps a dead helper's slot: the sim errs on
// the side of the quota.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
