// Package sim is a driver that stands in for Virtualization.framework on
// Linux (CI, make run) and in tests: VMs that boot in a configurable time,
// a guest that honours or ignores a shutdown request (the framework's
// requestStop, or its own guest agent's), vsock streams served by a
// pluggable GuestHandler, a record beside each disk of whether it was
// closed cleanly, and a Kernel that models the host's two-VM quota
// exactly, stuck-counter bug included.
package sim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// Defaults of the simulated guest.
const (
	DefaultBootTime     = 200 * time.Millisecond
	DefaultShutdownTime = 50 * time.Millisecond
)

// GuestHandler serves one vsock stream the host opened to the guest's port.
// ctx ends when the VM stops; conn is closed when the handler returns.
type GuestHandler func(ctx context.Context, port uint32, conn net.Conn)

// StopKind is how a VM's last stop went.
type StopKind string

// The stop kinds.
const (
	// StopGraceful: the guest shut down within the grace period.
	StopGraceful StopKind = "graceful"
	// StopForced: the VM was forced off.
	StopForced StopKind = "forced"
	// StopGuest: the guest shut itself down, asked by its guest agent
	// (ShutdownGuest).
	StopGuest StopKind = "guest"
)

// method is the driver's name for a stop of kind k.
func (k StopKind) method() driver.StopMethod {
	switch k {
	case StopGraceful:
		return driver.StopRequestStop
	case StopForced:
		return driver.StopForced
	case StopGuest:
		return driver.StopGuestShutdown
	}
	return ""
}

type options struct {
	clock         clock.Clock
	bootTime      time.Duration
	shutdownTime  time.Duration
	ignoreRequest bool
	guest         GuestHandler
	log           logr.Logger
}

// Option configures a Driver.
type Option func(*options)

// WithClock sets the clock that times boot and shutdown.
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithBootTime sets how long a start takes.
func WithBootTime(d time.Duration) Option { return func(o *options) { o.bootTime = d } }

// WithShutdownTime sets how long a guest takes to shut down once asked.
func WithShutdownTime(d time.Duration) Option { return func(o *options) { o.shutdownTime = d } }

// WithGuestIgnoringShutdown makes the guests ignore shutdown requests, the
// framework's and their guest agent's alike (a hung guest), so that every
// Stop ends in a forced stop after its grace period.
func WithGuestIgnoringShutdown() Option { return func(o *options) { o.ignoreRequest = true } }

// WithGuestHandler plugs the guest side of DialGuest.
func WithGuestHandler(h GuestHandler) Option { return func(o *options) { o.guest = h } }

// WithLogger sets the logger.
func WithLogger(l logr.Logger) Option { return func(o *options) { o.log = l } }

// Driver makes simulated VMs that count against one Kernel.
type Driver struct {
	kernel Kernel
	opts   options
}

var _ driver.Driver = (*Driver)(nil)

// New returns a driver whose VMs count against kernel.
func New(kernel Kernel, opts ...Option) *Driver {
	o := options{
		clock:        clock.RealClock{},
		bootTime:     DefaultBootTime,
		shutdownTime: DefaultShutdownTime,
		log:          logr.Discard(),
	}
	for _, opt := range opts {
		opt(&o)
	}
	return &Driver{kernel: kernel, opts: o}
}

// NewVM implements driver.Driver.
func (d *Driver) NewVM(spec vmspec.VMSpec) (driver.VM, error) {
	if err := spec.Validate(); err != nil {
		return nil, &driver.VZError{Domain: driver.DomainVZ, Code: driver.CodeInvalidVirtualMachineConfiguration, Message: err.Error()}
	}
	return &VM{
		d: d, spec: spec, state: driver.StateStopped, conns: map[net.Conn]struct{}{},
		log: d.opts.log.WithValues("vm", spec.Name),
	}, nil
}

// NewMachineIdentifier returns a fresh random machine identifier, the sim's
// stand-in for VZMacMachineIdentifier.
func NewMachineIdentifier() ([]byte, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("generating machine identifier: %w", err)
	}
	return b, nil
}

type specKey struct{}

// GuestSpec is the spec of the VM whose guest a GuestHandler serves, so
// that one handler can tell the VMs of an in-process host apart.
func GuestSpec(ctx context.Context) (vmspec.VMSpec, bool) {
	s, ok := ctx.Value(specKey{}).(vmspec.VMSpec)
	return s, ok
}

// VM is a simulated VM.
type VM struct {
	d    *Driver
	spec vmspec.VMSpec
	log  logr.Logger

	mu         sync.Mutex
	state      driver.State
	starts     uint64 // tells a stale start from the current one
	slot       Slot
	cancelBoot context.CancelFunc
	stopDone   chan struct{} // closed when the Stop in progress ends
	guestCtx   context.Context
	guestEnd   context.CancelFunc
	conns      map[net.Conn]struct{}
	lastStop   StopKind
}

var (
	_ driver.VM           = (*VM)(nil)
	_ driver.StopReporter = (*VM)(nil)
)

// vmKey carries, in a guest's context, the VM the guest runs in.
type vmKey struct{}

// ShutdownGuest is what a sim guest does when its guest agent is asked to
// shut macOS down (`shutdown -h now` on a Mac): the VM powers off cleanly
// once the shutdown time has passed. ctx is the one a GuestHandler is
// given. A guest that ignores shutdown requests (WithGuestIgnoringShutdown)
// says nothing and stays up, as a hung guest would.
func ShutdownGuest(ctx context.Context) error {
	v, ok := ctx.Value(vmKey{}).(*VM)
	if !ok {
		return ErrNotAGuest
	}
	v.shutdownFromGuest()
	return nil
}

// shutdownFromGuest starts the guest's own shutdown of a running VM. A
// Stop that comes meanwhile waits for it, as it waits for its own.
func (v *VM) shutdownFromGuest() {
	if v.d.opts.ignoreRequest {
		v.log.Info("Guest ignores the shutdown request")
		return
	}
	v.mu.Lock()
	if v.state != driver.StateRunning {
		v.mu.Unlock()
		return
	}
	done := make(chan struct{})
	v.state, v.stopDone = driver.StateStopping, done
	v.mu.Unlock()
	v.log.Info("Guest shutting down")
	go func() {
		t := v.d.opts.clock.NewTimer(v.d.opts.shutdownTime)
		defer t.Stop()
		<-t.C()
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.stopDone != done {
			return // another stop finished the VM first
		}
		if err := v.finishLocked(StopGuest); err != nil {
			v.log.Error(err, "Releasing the quota slot after the guest's shutdown failed")
		}
	}()
}

// Start implements driver.VM: it takes a quota slot, then boots for the
// boot time. A start over the quota fails with the code-6 VZError.
func (v *VM) Start(ctx context.Context) error {
	v.mu.Lock()
	if v.state != driver.StateStopped && v.state != driver.StateError {
		state := v.state
		v.mu.Unlock()
		return &driver.VZError{Domain: driver.DomainVZ, Code: driver.CodeInvalidVirtualMachineStateTransition,
			Message: fmt.Sprintf("cannot start a VM that is %s", state)}
	}
	slot, err := v.d.kernel.Acquire(v.spec.Name)
	if err != nil {
		v.mu.Unlock()
		return fmt.Errorf("starting VM %s: %w", v.spec.Name, err)
	}
	// The disk is open from here: a helper killed now leaves it "open".
	v.recordDisk(DiskOpen)
	bootCtx, cancel := context.WithCancel(ctx)
	v.starts++
	start := v.starts
	v.state, v.slot, v.cancelBoot = driver.StateStarting, slot, cancel
	v.mu.Unlock()
	defer cancel()

	booted := v.d.opts.clock.NewTimer(v.d.opts.bootTime)
	defer booted.Stop()
	select {
	case <-booted.C():
	case <-bootCtx.Done():
	}

	v.mu.Lock()
	defer v.mu.Unlock()
	if v.state != driver.StateStarting || v.starts != start {
		return fmt.Errorf("starting VM %s: %w", v.spec.Name, ErrStoppedWhileStarting)
	}
	if err := ctx.Err(); err != nil {
		v.state = driver.StateStopped
		v.recordDisk(DiskDirty)
		return fmt.Errorf("starting VM %s: %w", v.spec.Name, errors.Join(err, v.d.kernel.Release(slot)))
	}
	v.state = driver.StateRunning
	guestCtx := context.WithValue(context.WithValue(context.Background(), specKey{}, v.spec), vmKey{}, v)
	v.guestCtx, v.guestEnd = context.WithCancel(guestCtx)
	v.log.Info("VM running", "slot", slot)
	return nil
}

// Stop implements driver.VM. A guest that honours the request is down
// after the shutdown time; one that ignores it, or outlasts graceful, is
// forced off. ctx ending early cuts the grace period short.
func (v *VM) Stop(ctx context.Context, graceful time.Duration) error {
	v.mu.Lock()
	switch v.state {
	case driver.StateStopped, driver.StateError:
		v.mu.Unlock()
		return nil
	case driver.StateStarting:
		// Nothing to shut down gracefully yet.
		v.cancelBoot()
		err := v.finishLocked(StopForced)
		v.mu.Unlock()
		return err
	case driver.StateStopping:
		done := v.stopDone
		v.mu.Unlock()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("waiting for VM %s to stop: %w", v.spec.Name, ctx.Err())
		}
	}
	v.state, v.stopDone = driver.StateStopping, make(chan struct{})
	v.mu.Unlock()

	kind := StopForced
	if graceful > 0 {
		var guestDown <-chan time.Time
		if !v.d.opts.ignoreRequest {
			t := v.d.opts.clock.NewTimer(v.d.opts.shutdownTime)
			defer t.Stop()
			guestDown = t.C()
		}
		grace := v.d.opts.clock.NewTimer(graceful)
		defer grace.Stop()
		select {
		case <-guestDown:
			kind = StopGraceful
		case <-grace.C():
		case <-ctx.Done():
		}
	}

	v.mu.Lock()
	defer v.mu.Unlock()
	return v.finishLocked(kind)
}

// finishLocked turns the VM off: the guest's streams close and the quota
// slot is released (or stays stuck, under the fault).
func (v *VM) finishLocked(kind StopKind) error {
	if v.guestEnd != nil {
		v.guestEnd()
		v.guestEnd = nil
	}
	for c := range v.conns {
		c.Close()
	}
	clear(v.conns)
	v.state, v.lastStop = driver.StateStopped, kind
	if kind == StopForced {
		v.recordDisk(DiskDirty)
	} else {
		v.recordDisk(DiskClean)
	}
	if v.stopDone != nil {
		close(v.stopDone)
		v.stopDone = nil
	}
	v.log.Info("VM stopped", "stop", kind, "slot", v.slot)
	if err := v.d.kernel.Release(v.slot); err != nil {
		return fmt.Errorf("stopping VM %s: %w", v.spec.Name, err)
	}
	return nil
}

// State implements driver.VM.
func (v *VM) State() driver.State {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.state
}

// LastStop is how the VM's last stop went; empty before the first one.
func (v *VM) LastStop() StopKind {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastStop
}

// LastStopMethod implements driver.StopReporter.
func (v *VM) LastStopMethod() driver.StopMethod {
	return v.LastStop().method()
}

// recordDisk writes the disk's state beside it. The record is the sim's
// evidence of a clean close, which a real disk image does not keep: a
// failure to write it is logged, and the VM goes on.
func (v *VM) recordDisk(st DiskState) {
	if err := writeDiskState(v.spec.DiskPath, st); err != nil {
		v.log.Error(err, "Recording the disk's state failed", "state", st)
	}
}

// DialGuest implements driver.VM: it returns one end of a socket pair
// whose other end is handed to the driver's GuestHandler.
func (v *VM) DialGuest(ctx context.Context, port uint32) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.state != driver.StateRunning:
		return nil, fmt.Errorf("dialing guest port %d of %s: %w (%s)", port, v.spec.Name, driver.ErrNotRunning, v.state)
	case !v.spec.Vsock:
		return nil, fmt.Errorf("dialing guest port %d of %s: %w", port, v.spec.Name, driver.ErrNoVsock)
	case v.d.opts.guest == nil:
		return nil, fmt.Errorf("dialing guest port %d of %s: %w", port, v.spec.Name, ErrNoGuestHandler)
	}
	host, guest, err := StreamPair()
	if err != nil {
		return nil, fmt.Errorf("dialing guest port %d of %s: %w", port, v.spec.Name, err)
	}
	// Only the guest end is tracked: closing it at stop ends the host's reads too.
	v.conns[guest] = struct{}{}
	go v.serveGuest(v.guestCtx, port, guest)
	return host, nil
}

func (v *VM) serveGuest(ctx context.Context, port uint32, conn net.Conn) {
	defer func() {
		conn.Close()
		v.mu.Lock()
		delete(v.conns, conn)
		v.mu.Unlock()
	}()
	v.d.opts.guest(ctx, port, conn)
}
