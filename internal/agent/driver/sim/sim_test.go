package sim

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

func spec(name string) vmspec.VMSpec {
	return vmspec.VMSpec{
		Name: "tenant-a/" + name, UID: "uid-" + name, CPUCount: 4, MemoryBytes: 8 << 30,
		DiskPath: "/instances/" + name + "/disk.img", DiskBytes: 200 << 30,
		BootLoader: vmspec.BootLoaderMacOS, HardwareModel: []byte("model"), MachineIdentifier: []byte("id-" + name),
		AuxiliaryStoragePath: "/instances/" + name + "/aux.img",
		Network:              vmspec.NetworkNAT, MACAddress: vmspec.MACAddress("uid-" + name).String(),
		Vsock: true, Display: vmspec.DefaultDisplay(),
	}
}

func newVM(t *testing.T, d *Driver, name string) *VM {
	t.Helper()
	vm, err := d.NewVM(spec(name))
	if err != nil {
		t.Fatal(err)
	}
	return vm.(*VM)
}

// fast is a driver that boots and shuts down at once, on the real clock.
func fast(k Kernel, opts ...Option) *Driver {
	return New(k, append([]Option{WithBootTime(0), WithShutdownTime(0)}, opts...)...)
}

// stepWhenWaiting advances fc by d once n timers wait on it.
func stepWhenWaiting(t *testing.T, fc *clocktesting.FakeClock, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for fc.Waiters() < n {
		if time.Now().After(deadline) {
			t.Fatal("nothing waited on the clock")
		}
		time.Sleep(time.Millisecond)
	}
	fc.Step(d)
}

func TestNewVMRefusesAnInvalidSpec(t *testing.T) {
	s := spec("bad")
	s.CPUCount = 0
	_, err := fast(NewMemKernel()).NewVM(s)
	var vz *driver.VZError
	if !errors.As(err, &vz) || vz.Code != driver.CodeInvalidVirtualMachineConfiguration {
		t.Fatalf("got %v, want an invalid-configuration VZError", err)
	}
}

func TestStartBootsForTheBootTime(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	vm := newVM(t, New(NewMemKernel(), WithClock(fc), WithBootTime(time.Minute)), "a")
	done := make(chan error, 1)
	go func() { done <- vm.Start(context.Background()) }()
	stepWhenWaiting(t, fc, 1, 59*time.Second)
	if got := vm.State(); got != driver.StateStarting {
		t.Fatalf("before the boot time the VM is %s, want Starting", got)
	}
	fc.Step(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := vm.State(); got != driver.StateRunning {
		t.Fatalf("after the boot time the VM is %s, want Running", got)
	}
}

func TestQuotaOverConcurrentStarts(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	k := NewMemKernel()
	d := New(k, WithClock(fc), WithBootTime(time.Second))
	vms := []*VM{newVM(t, d, "a"), newVM(t, d, "b"), newVM(t, d, "c")}
	errs := make([]error, len(vms))
	var wg sync.WaitGroup
	for i, vm := range vms {
		wg.Go(func() { errs[i] = vm.Start(context.Background()) })
	}
	// The refused start returns at once; the two others wait to boot.
	deadline := time.Now().Add(5 * time.Second)
	for n, _ := k.Active(); n < 2 || countStarting(vms) < 2; n, _ = k.Active() {
		if time.Now().After(deadline) {
			t.Fatal("two VMs never started booting")
		}
		time.Sleep(time.Millisecond)
	}
	stepWhenWaiting(t, fc, 2, time.Second)
	wg.Wait()

	var refused *VM
	for i, err := range errs {
		switch {
		case err == nil:
		case driver.IsLimitExceeded(err) && refused == nil:
			refused = vms[i]
		default:
			t.Fatalf("start %d: %v", i, err)
		}
	}
	if refused == nil || refused.State() != driver.StateStopped {
		t.Fatalf("want exactly one start refused with code 6 and left Stopped, got %v", errs)
	}
	// After one VM stops, the refused one starts.
	for _, vm := range vms {
		if vm != refused {
			if err := vm.Stop(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	restarted := make(chan error, 1)
	go func() { restarted <- refused.Start(context.Background()) }()
	stepWhenWaiting(t, fc, 1, time.Second)
	if err := <-restarted; err != nil {
		t.Fatalf("a start after a stop: %v", err)
	}
}

func countStarting(vms []*VM) int {
	n := 0
	for _, vm := range vms {
		if vm.State() == driver.StateStarting {
			n++
		}
	}
	return n
}

func TestStuckQuotaRefusesAStartWithOneVMRunning(t *testing.T) {
	k := NewMemKernel()
	d := fast(k)
	a, b, c := newVM(t, d, "a"), newVM(t, d, "b"), newVM(t, d, "c")
	ctx := context.Background()
	for _, vm := range []*VM{a, b} {
		if err := vm.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.SetStuckQuota(true); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if a.State() != driver.StateStopped || b.State() != driver.StateRunning {
		t.Fatalf("a is %s and b %s, want Stopped and Running", a.State(), b.State())
	}
	if err := c.Start(ctx); !driver.IsLimitExceeded(err) {
		t.Fatalf("with one VM running and a stuck slot, a start got %v, want code 6", err)
	}
	if err := b.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); !driver.IsLimitExceeded(err) {
		t.Fatalf("with no VM running and two stuck slots, a start got %v, want code 6", err)
	}
	if err := k.Reboot(); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatalf("after a reboot: %v", err)
	}
}

func TestStop(t *testing.T) {
	cases := []struct {
		name     string
		opts     []Option
		graceful time.Duration
		timers   int
		step     time.Duration
		want     StopKind
	}{
		{"a guest that honours the request shuts down within the grace period",
			nil, 30 * time.Second, 2, 10 * time.Second, StopGraceful},
		{"a guest that ignores the request is forced off when the grace period ends",
			[]Option{WithGuestIgnoringShutdown()}, 30 * time.Second, 1, 30 * time.Second, StopForced},
		{"a guest slower than the grace period is forced off",
			[]Option{WithShutdownTime(time.Minute)}, 30 * time.Second, 2, 30 * time.Second, StopForced},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fc := clocktesting.NewFakeClock(time.Now())
			k := NewMemKernel()
			opts := append([]Option{WithClock(fc), WithBootTime(0), WithShutdownTime(10 * time.Second)}, c.opts...)
			vm := newVM(t, New(k, opts...), "a")
			started := make(chan error, 1)
			go func() { started <- vm.Start(context.Background()) }()
			stepWhenWaiting(t, fc, 1, 0)
			if err := <-started; err != nil {
				t.Fatal(err)
			}
			stopped := make(chan error, 1)
			go func() { stopped <- vm.Stop(context.Background(), c.graceful) }()
			stepWhenWaiting(t, fc, c.timers, c.step-time.Nanosecond)
			if got := vm.State(); got != driver.StateStopping {
				t.Fatalf("just before the deadline the VM is %s, want Stopping", got)
			}
			fc.Step(time.Nanosecond)
			if err := <-stopped; err != nil {
				t.Fatal(err)
			}
			if vm.State() != driver.StateStopped || vm.LastStop() != c.want {
				t.Fatalf("VM is %s after a %s stop, want Stopped after %s", vm.State(), vm.LastStop(), c.want)
			}
			mustActive(t, k, 0)
		})
	}
}

func TestStopEdges(t *testing.T) {
	t.Run("stopping a stopped VM does nothing", func(t *testing.T) {
		vm := newVM(t, fast(NewMemKernel()), "a")
		if err := vm.Stop(context.Background(), time.Second); err != nil || vm.LastStop() != "" {
			t.Fatalf("got %v, last stop %q", err, vm.LastStop())
		}
	})
	t.Run("a stop during boot ends the start and frees the slot", func(t *testing.T) {
		k := NewMemKernel()
		vm := newVM(t, New(k, WithBootTime(time.Hour)), "a")
		started := make(chan error, 1)
		go func() { started <- vm.Start(context.Background()) }()
		for vm.State() != driver.StateStarting {
			time.Sleep(time.Millisecond)
		}
		if err := vm.Stop(context.Background(), time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := <-started; !errors.Is(err, ErrStoppedWhileStarting) {
			t.Fatalf("start got %v, want ErrStoppedWhileStarting", err)
		}
		mustActive(t, k, 0)
	})
	t.Run("a start whose context ends during boot frees the slot", func(t *testing.T) {
		k := NewMemKernel()
		vm := newVM(t, New(k, WithBootTime(time.Hour)), "a")
		ctx, cancel := context.WithCancel(context.Background())
		started := make(chan error, 1)
		go func() { started <- vm.Start(ctx) }()
		for vm.State() != driver.StateStarting {
			time.Sleep(time.Millisecond)
		}
		cancel()
		if err := <-started; !errors.Is(err, context.Canceled) {
			t.Fatalf("start got %v, want context.Canceled", err)
		}
		if vm.State() != driver.StateStopped {
			t.Fatalf("VM is %s", vm.State())
		}
		mustActive(t, k, 0)
	})
	t.Run("starting a running VM is an invalid transition", func(t *testing.T) {
		vm := newVM(t, fast(NewMemKernel()), "a")
		if err := vm.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		var vz *driver.VZError
		if err := vm.Start(context.Background()); !errors.As(err, &vz) || vz.Code != driver.CodeInvalidVirtualMachineStateTransition {
			t.Fatalf("got %v, want code 4", err)
		}
	})
	t.Run("a stop whose context ends forces the VM off at once", func(t *testing.T) {
		vm := newVM(t, fast(NewMemKernel(), WithGuestIgnoringShutdown()), "a")
		if err := vm.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := vm.Stop(ctx, time.Hour); err != nil || vm.LastStop() != StopForced {
			t.Fatalf("got %v after a %q stop", err, vm.LastStop())
		}
	})
}

func echo(ctx context.Context, port uint32, conn net.Conn) {
	_, _ = conn.Write([]byte{byte(port)})
	_, _ = io.Copy(conn, conn)
}

func TestDialGuest(t *testing.T) {
	vm := newVM(t, fast(NewMemKernel(), WithGuestHandler(echo)), "a")
	ctx := context.Background()
	if _, err := vm.DialGuest(ctx, 7); !errors.Is(err, driver.ErrNotRunning) {
		t.Fatalf("dialing a stopped VM got %v, want ErrNotRunning", err)
	}
	if err := vm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := vm.DialGuest(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	go func() { _, _ = conn.Write([]byte("hello")) }()
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "\x07hello" {
		t.Fatalf("got %q, %v", buf, err)
	}
	// Stopping the VM ends the guest's streams.
	if err := vm.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("after the stop a read got %v, want EOF", err)
	}
}

func TestDialGuestFailures(t *testing.T) {
	cases := []struct {
		name string
		opts []Option
		spec func(vmspec.VMSpec) vmspec.VMSpec
		want error
	}{
		{"without a guest handler there is no guest to dial", nil, nil, ErrNoGuestHandler},
		{"a VM without vsock cannot be dialled", []Option{WithGuestHandler(echo)},
			func(s vmspec.VMSpec) vmspec.VMSpec { s.Vsock = false; return s }, driver.ErrNoVsock},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := spec("a")
			if c.spec != nil {
				s = c.spec(s)
			}
			vm, err := fast(NewMemKernel(), c.opts...).NewVM(s)
			if err != nil {
				t.Fatal(err)
			}
			if err := vm.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, err := vm.DialGuest(context.Background(), 1); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

func TestGuestHandlerSeesItsVM(t *testing.T) {
	got := make(chan string, 1)
	d := fast(NewMemKernel(), WithGuestHandler(func(ctx context.Context, _ uint32, _ net.Conn) {
		s, _ := GuestSpec(ctx)
		got <- s.Name
	}))
	vm := newVM(t, d, "b")
	if err := vm.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	conn, err := vm.DialGuest(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if name := <-got; name != "tenant-a/b" {
		t.Fatalf("the handler saw %q", name)
	}
}

func TestNewMachineIdentifierIsRandom(t *testing.T) {
	a, err := NewMachineIdentifier()
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewMachineIdentifier()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) == 0 || string(a) == string(b) {
		t.Fatalf("identifiers %x and %x", a, b)
	}
}
