package simguest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
	"github.com/boualleiguie/macrack-operator/internal/guest"
)

// The host asks the sim guest agent, through the real protocol, to shut
// macOS down: the sim VM powers off by itself, lets go of its quota slot
// and leaves its disk clean.
func TestTheSimGuestShutsItsVMDownWhenAsked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := sim.NewMemKernel()
	d := sim.New(k, sim.WithBootTime(0), sim.WithShutdownTime(10*time.Millisecond),
		sim.WithGuestHandler(Handler(ctx, Reporter{Clock: clock.RealClock{}}, logr.Discard())))
	dir := t.TempDir()
	spec := vmspec.VMSpec{
		Name: "tenant-a/ci-1", UID: "uid-ci-1", CPUCount: 4, MemoryBytes: 8 << 30,
		DiskPath: filepath.Join(dir, "disk.img"), DiskBytes: 200 << 30,
		BootLoader: vmspec.BootLoaderMacOS, HardwareModel: []byte("model"), MachineIdentifier: []byte("id"),
		AuxiliaryStoragePath: filepath.Join(dir, "aux.img"), Network: vmspec.NetworkNAT,
		MACAddress: vmspec.MACAddress("uid-ci-1").String(), Vsock: true, Display: vmspec.DefaultDisplay(),
	}
	vm, err := d.NewVM(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := vm.DialGuest(ctx, guest.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	c := guest.NewClient(conn)
	defer c.Close()
	// The ack may or may not beat the guest's power-off to the host; the
	// VM going down is what counts.
	_ = c.Shutdown(ctx)
	for vm.State() != driver.StateStopped {
		if ctx.Err() != nil {
			t.Fatalf("the VM is %s after its guest was asked to shut down", vm.State())
		}
		time.Sleep(time.Millisecond)
	}
	if m := vm.(driver.StopReporter).LastStopMethod(); m != driver.StopGuestShutdown {
		t.Errorf("last stop %q, want %q", m, driver.StopGuestShutdown)
	}
	if n, _ := k.Active(); n != 0 {
		t.Errorf("the kernel counts %d VMs after the guest shut down", n)
	}
	if ok, err := sim.DiskClosedCleanly(spec.DiskPath); err != nil || !ok {
		t.Errorf("the disk is not closed cleanly (%v)", err)
	}
}
