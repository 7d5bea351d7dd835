package sim

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// StickSlots is the field bug once: the counter fills with slots no VM
// holds, without the fault switch, so the next start is refused while no
// VM runs; stopped VMs are let go as usual, and a reboot clears the stuck
// slots.
func TestStickSlotsFillsTheCounterUntilAReboot(t *testing.T) {
	for name, k := range kernels(t) {
		t.Run("a kernel "+name, func(t *testing.T) {
			a := mustAcquire(t, k)
			added, err := k.StickSlots(QuotaLimit)
			if err != nil {
				t.Fatal(err)
			}
			if added != QuotaLimit-1 {
				t.Fatalf("added %d stuck slots beside one VM, want %d: never past the limit", added, QuotaLimit-1)
			}
			mustActive(t, k, QuotaLimit)
			_, err = k.Acquire("next")
			requireLimit(t, err)
			// The fault switch is off: a VM that stops is let go.
			if err := k.Release(a); err != nil {
				t.Fatal(err)
			}
			mustActive(t, k, QuotaLimit-1)
			if n, _ := k.StickSlots(0); n != 0 {
				t.Fatalf("StickSlots(0) added %d", n)
			}
			if err := k.Reboot(); err != nil {
				t.Fatal(err)
			}
			mustActive(t, k, 0)
			// Positive control: after the reboot, starts succeed again and
			// stop cleanly.
			b := mustAcquire(t, k)
			if err := k.Release(b); err != nil {
				t.Fatal(err)
			}
			mustActive(t, k, 0)
		})
	}
}

// MaxActive counts VMs, not stuck slots, and keeps its high-water mark
// across releases and reboots.
func TestMaxActiveIsTheHighWaterMarkOfVMs(t *testing.T) {
	for name, k := range kernels(t) {
		t.Run("a kernel "+name, func(t *testing.T) {
			if n, err := k.MaxActive(); err != nil || n != 0 {
				t.Fatalf("max active %d (%v) on a fresh kernel, want 0", n, err)
			}
			a := mustAcquire(t, k)
			if _, err := k.StickSlots(1); err != nil {
				t.Fatal(err)
			}
			if n, _ := k.MaxActive(); n != 1 {
				t.Fatalf("max active %d with one VM and one stuck slot, want 1", n)
			}
			if err := k.Release(a); err != nil {
				t.Fatal(err)
			}
			if err := k.Reboot(); err != nil {
				t.Fatal(err)
			}
			b, c := mustAcquire(t, k), mustAcquire(t, k)
			_ = k.Release(b)
			_ = k.Release(c)
			if err := k.Reboot(); err != nil {
				t.Fatal(err)
			}
			if n, _ := k.MaxActive(); n != 2 {
				t.Fatalf("max active %d after two VMs ran at once, want 2, kept across reboots", n)
			}
		})
	}
}

// The disk record says how each stop left the disk: open while the VM
// runs, clean after a requestStop the guest honoured or the guest's own
// shutdown, dirty after a forced stop.
func TestTheDiskRecordSaysWhetherTheDiskWasClosedCleanly(t *testing.T) {
	dir := t.TempDir()
	withDisk := func(name string) *VM {
		s := spec(name)
		s.DiskPath = filepath.Join(dir, name+".img")
		return mustNewVM(t, fast(NewMemKernel(), WithGuestHandler(echo)), s)
	}
	ctx := context.Background()
	state := func(vm *VM) DiskState {
		t.Helper()
		st, err := ReadDiskState(vm.spec.DiskPath)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	vm := withDisk("graceful")
	if st := state(vm); st != "" {
		t.Fatalf("disk state %q before any start, want none", st)
	}
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if st := state(vm); st != DiskOpen {
		t.Fatalf("disk state %q while running, want %q", st, DiskOpen)
	}
	if err := vm.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if st, m := state(vm), vm.LastStopMethod(); st != DiskClean || m != driver.StopRequestStop {
		t.Fatalf("after a graceful stop: disk %q, method %q; want %q, %q", st, m, DiskClean, driver.StopRequestStop)
	}
	if ok, err := DiskClosedCleanly(vm.spec.DiskPath); err != nil || !ok {
		t.Fatalf("DiskClosedCleanly = %v, %v after a graceful stop", ok, err)
	}

	forced := withDisk("forced")
	if err := forced.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := forced.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if st, m := state(forced), forced.LastStopMethod(); st != DiskDirty || m != driver.StopForced {
		t.Fatalf("after a forced stop: disk %q, method %q; want %q, %q", st, m, DiskDirty, driver.StopForced)
	}
	if ok, _ := DiskClosedCleanly(forced.spec.DiskPath); ok {
		t.Fatal("a forced-off disk reads as closed cleanly")
	}
}

// A guest asked by its guest agent shuts down by itself: the VM stops,
// its slot is let go and its disk is clean. A hung guest (one ignoring
// shutdown requests) stays up.
func TestShutdownGuestPowersTheVMOffCleanly(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		ignore bool
	}{{"honouring", false}, {"hung", true}} {
		t.Run(tc.name, func(t *testing.T) {
			k := NewMemKernel()
			guestCtx := make(chan context.Context, 1)
			opts := []Option{WithGuestHandler(func(ctx context.Context, _ uint32, conn net.Conn) {
				guestCtx <- ctx
				<-ctx.Done()
			})}
			if tc.ignore {
				opts = append(opts, WithGuestIgnoringShutdown())
			}
			s := spec(tc.name)
			s.DiskPath = filepath.Join(dir, tc.name+".img")
			vm := mustNewVM(t, fast(k, opts...), s)
			if err := vm.Start(ctx); err != nil {
				t.Fatal(err)
			}
			conn, err := vm.DialGuest(ctx, 1024)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := ShutdownGuest(<-guestCtx); err != nil {
				t.Fatal(err)
			}
			if tc.ignore {
				time.Sleep(50 * time.Millisecond)
				if st := vm.State(); st != driver.StateRunning {
					t.Fatalf("a hung guest's VM is %s, want Running", st)
				}
				mustActive(t, k, 1)
				return
			}
			deadline := time.Now().Add(5 * time.Second)
			for vm.State() != driver.StateStopped {
				if time.Now().After(deadline) {
					t.Fatalf("the VM is %s after its guest shut down", vm.State())
				}
				time.Sleep(time.Millisecond)
			}
			mustActive(t, k, 0)
			if m := vm.LastStopMethod(); m != driver.StopGuestShutdown {
				t.Errorf("last stop %q, want %q", m, driver.StopGuestShutdown)
			}
			if ok, err := DiskClosedCleanly(s.DiskPath); err != nil || !ok {
				t.Errorf("the disk is not closed cleanly after the guest's shutdown (%v)", err)
			}
		})
	}
	if err := ShutdownGuest(context.Background()); !errors.Is(err, ErrNotAGuest) {
		t.Errorf("ShutdownGuest outside a guest: %v, want ErrNotAGuest", err)
	}
}

func mustNewVM(t *testing.T, d *Driver, s vmspec.VMSpec) *VM {
	t.Helper()
	vm, err := d.NewVM(s)
	if err != nil {
		t.Fatal(err)
	}
	return vm.(*VM)
}
