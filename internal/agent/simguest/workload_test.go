package simguest

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
	"github.com/boualleiguie/macrack-operator/internal/guest"
)

// oneJob is a Workload that takes one config and waits for a job.
type oneJob struct {
	once guest.OneConfig
	vm   string
}

func (w *oneJob) Configure(_ context.Context, c guest.Config) error {
	_, err := w.once.Set(c)
	return err
}

func (w *oneJob) Status() (bool, *guest.JobReport) {
	if _, ok := w.once.Get(); ok {
		return true, &guest.JobReport{Phase: guest.JobWaiting}
	}
	return false, nil
}

func (w *oneJob) Stop(context.Context) error { return nil }

// A sim guest with a workload takes a config through the real protocol;
// after its VM restarts it is a new guest, not configured, with a new
// workload. The control: a sim guest without one refuses a config.
func TestEachBootOfASimVMHasItsOwnWorkload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	var made []*oneJob
	h := Handler(ctx, Reporter{XcodeVersions: []string{"16.4"}, HeadroomBytes: 1 << 30, Clock: clock.RealClock{}}, logr.Discard(),
		WithWorkload(func(vmCtx context.Context) guest.Workload {
			spec, _ := sim.GuestSpec(vmCtx)
			w := &oneJob{vm: spec.Name}
			mu.Lock()
			made = append(made, w)
			mu.Unlock()
			return w
		}))
	d := sim.New(sim.NewMemKernel(), sim.WithBootTime(0), sim.WithShutdownTime(0), sim.WithGuestHandler(h))
	vm := newVM(t, d, "ci-1")
	raw, err := json.Marshal(guest.Config{Version: guest.ConfigVersion, Runner: &guest.RunnerConfig{URL: "https://gitlab.example.com", Token: "glrt-x"}})
	if err != nil {
		t.Fatal(err)
	}
	report := func() guest.Report {
		t.Helper()
		conn, err := vm.DialGuest(ctx, guest.DefaultPort)
		if err != nil {
			t.Fatal(err)
		}
		c := guest.NewClient(conn)
		defer c.Close()
		r, err := c.Report(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if r := report(); r.Configured {
		t.Fatal("a fresh guest says it is configured")
	}
	conn, err := vm.DialGuest(ctx, guest.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	c := guest.NewClient(conn)
	if err := c.Configure(ctx, raw); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	c.Close()
	// A new connection reaches the same guest, configured.
	if r := report(); !r.Configured || r.Job == nil || r.Job.Phase != guest.JobWaiting {
		t.Fatalf("after Configure: %+v", r)
	}

	if err := vm.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if r := report(); r.Configured || r.Job != nil {
		t.Fatalf("after a restart the guest says %+v, want a guest not configured", r)
	}
	mu.Lock()
	n, name := len(made), made[0].vm
	mu.Unlock()
	if n != 2 || name != "tenant-a/ci-1" {
		t.Fatalf("%d workloads for two boots (first for %q), want 2 for tenant-a/ci-1", n, name)
	}

	// The control: without WithWorkload, the guest refuses a config.
	plain := sim.New(sim.NewMemKernel(), sim.WithBootTime(0), sim.WithGuestHandler(Handler(ctx, Reporter{Clock: clock.RealClock{}}, logr.Discard())))
	other := newVM(t, plain, "ci-2")
	if err := other.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err = other.DialGuest(ctx, guest.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	c = guest.NewClient(conn)
	defer c.Close()
	if err := c.Configure(ctx, raw); !errors.Is(err, guest.ErrRemote) || !strings.Contains(err.Error(), "runs no workloads") {
		t.Fatalf("Configure of a guest without workloads: %v", err)
	}
}

func newVM(t *testing.T, d *sim.Driver, name string) driver.VM {
	t.Helper()
	vm, _ := newVMWithSpec(t, d, name)
	return vm
}

func newVMWithSpec(t *testing.T, d *sim.Driver, name string) (driver.VM, vmspec.VMSpec) {
	t.Helper()
	dir := t.TempDir()
	spec := vmspec.VMSpec{
		Name: "tenant-a/" + name, UID: "uid-" + name, CPUCount: 4, MemoryBytes: 8 << 30,
		DiskPath: filepath.Join(dir, "disk.img"), DiskBytes: 200 << 30,
		BootLoader: vmspec.BootLoaderMacOS, HardwareModel: []byte("model"), MachineIdentifier: []byte("id"),
		AuxiliaryStoragePath: filepath.Join(dir, "aux.img"), Network: vmspec.NetworkNAT,
		MACAddress: vmspec.MACAddress("uid-" + name).String(), Vsock: true, Display: vmspec.DefaultDisplay(),
	}
	vm, err := d.NewVM(spec)
	if err != nil {
		t.Fatal(err)
	}
	return vm, spec
}
