package host

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
)

// A sim host's boot id is made on its first read, is the same on every
// read after (by any number of readers at once), and changes only when
// the host reboots.
func TestTheSimBootIDLastsUntilAReboot(t *testing.T) {
	ctx := context.Background()
	b := SimBootID{Dir: filepath.Join(t.TempDir(), "kernel")}
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			id, err := b.BootID(ctx)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] || len(id) != 36 {
			t.Fatalf("readers of one boot got %v, want one UUID", ids)
		}
	}
	again, err := b.BootID(ctx)
	if err != nil || again != ids[0] {
		t.Fatalf("boot id %q (%v) on a later read, want %q", again, err, ids[0])
	}
	next, err := b.NewBoot()
	if err != nil {
		t.Fatal(err)
	}
	if next == ids[0] {
		t.Fatal("the reboot kept the boot id")
	}
	if got, _ := b.BootID(ctx); got != next {
		t.Fatalf("boot id %q after the reboot, want %q", got, next)
	}
}

// The sim reboot is a host restart: the helpers die at once, the kernel's
// counter (stuck slots too) is zero, and the boot id is new.
func TestTheSimRebootKillsTheHelpersAndResetsTheKernel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	helpers, kernelDir := filepath.Join(dir, "run"), filepath.Join(dir, "kernel")
	if err := os.MkdirAll(helpers, 0o700); err != nil {
		t.Fatal(err)
	}
	// A stand-in helper: a process with its pid file where the launcher
	// keeps them. It ignores SIGTERM, as a helper busy stopping its VM
	// would not exit at once.
	cmd := exec.Command("sh", "-c", "trap '' TERM; exec sleep 60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if err := os.WriteFile(filepath.Join(helpers, "u1.pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := sim.NewFileKernel(kernelDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.StickSlots(sim.QuotaLimit); err != nil {
		t.Fatal(err)
	}
	boot := SimBootID{Dir: kernelDir}
	before, err := boot.BootID(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if err := (SimRebooter{HelperDir: helpers, Kernel: k, Boot: boot}).Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(cmd.Process.Pid, 0); err == nil {
		t.Error("the helper survived the reboot")
	}
	if _, err := os.Stat(filepath.Join(helpers, "u1.pid")); !os.IsNotExist(err) {
		t.Errorf("the dead helper's pid file is left (%v)", err)
	}
	if n, _ := k.Active(); n != 0 {
		t.Errorf("the kernel counts %d VMs after the reboot, want 0", n)
	}
	if after, _ := boot.BootID(ctx); after == before {
		t.Errorf("boot id %q unchanged by the reboot", after)
	}
}
