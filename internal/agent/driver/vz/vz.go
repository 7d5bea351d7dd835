//go:build darwin && arm64

// Package vz applies a vmspec.VMSpec with Virtualization.framework, through
// github.com/Code-Hex/vz/v3. It is deliberately thin: every decision about
// the VM is made, and tested, in vmspec. It builds only on macOS on Apple
// silicon, the only host that boots macOS guests; the binary that uses it
// needs the com.apple.security.virtualization entitlement.
package vz

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	vzf "github.com/Code-Hex/vz/v3"
	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// pollInterval is how often Stop checks whether the guest is down.
const pollInterval = 100 * time.Millisecond

type options struct {
	log   logr.Logger
	clock clock.WithTicker
}

// Option configures a Driver.
type Option func(*options)

// WithLogger sets the logger.
func WithLogger(l logr.Logger) Option { return func(o *options) { o.log = l } }

// WithClock sets the clock that times graceful stops.
func WithClock(c clock.WithTicker) Option { return func(o *options) { o.clock = c } }

// Driver makes Virtualization.framework VMs.
type Driver struct{ opts options }

var _ driver.Driver = (*Driver)(nil)

// New returns the driver.
func New(opts ...Option) *Driver {
	o := options{log: logr.Discard(), clock: clock.RealClock{}}
	for _, opt := range opts {
		opt(&o)
	}
	return &Driver{opts: o}
}

// NewMachineIdentifier returns a fresh VZMacMachineIdentifier's data
// representation, for vmspec.LoadOrCreateMachineIdentifier.
func NewMachineIdentifier() ([]byte, error) {
	id, err := vzf.NewMacMachineIdentifier()
	if err != nil {
		return nil, mapError(err)
	}
	// The representation points into Objective-C memory the identifier owns.
	return bytes.Clone(id.DataRepresentation()), nil
}

// NewVM implements driver.Driver: it builds and validates the configuration.
func (d *Driver) NewVM(spec vmspec.VMSpec) (driver.VM, error) {
	if err := spec.Validate(); err != nil {
		return nil, &driver.VZError{Domain: driver.DomainVZ, Code: driver.CodeInvalidVirtualMachineConfiguration, Message: err.Error()}
	}
	cfg, err := configure(spec)
	if err != nil {
		return nil, fmt.Errorf("configuring VM %s: %w", spec.Name, mapError(err))
	}
	vm, err := vzf.NewVirtualMachine(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating VM %s: %w", spec.Name, mapError(err))
	}
	return &VM{vm: vm, spec: spec, opts: d.opts, log: d.opts.log.WithValues("vm", spec.Name)}, nil
}

// configure renders spec and validates the result on this host: its
// hardware model must be one the host runs.
func configure(spec vmspec.VMSpec) (*vzf.VirtualMachineConfiguration, error) {
	r, err := render(spec)
	if err != nil {
		return nil, err
	}
	if !r.platform.HardwareModel().Supported() {
		return nil, &driver.VZError{Domain: driver.DomainVZ, Code: driver.CodeInvalidVirtualMachineConfiguration,
			Message: "this host does not support the image's hardware model"}
	}
	if _, err := r.config.Validate(); err != nil {
		return nil, err
	}
	return r.config, nil
}

// rendered is a VMSpec as Virtualization.framework objects, with the
// parts the darwin tests read back.
type rendered struct {
	config   *vzf.VirtualMachineConfiguration
	platform *vzf.MacPlatformConfiguration
	mac      *vzf.MACAddress
}

// render translates spec, field by field, without validating the result:
// that is configure's, on a host that runs VMs.
func render(spec vmspec.VMSpec) (*rendered, error) {
	boot, err := vzf.NewMacOSBootLoader()
	if err != nil {
		return nil, err
	}
	model, err := vzf.NewMacHardwareModelWithData(spec.HardwareModel)
	if err != nil {
		return nil, err
	}
	machineID, err := vzf.NewMacMachineIdentifierWithData(spec.MachineIdentifier)
	if err != nil {
		return nil, err
	}
	aux, err := vzf.NewMacAuxiliaryStorage(spec.AuxiliaryStoragePath)
	if err != nil {
		return nil, err
	}
	platform, err := vzf.NewMacPlatformConfiguration(
		vzf.WithMacHardwareModel(model),
		vzf.WithMacMachineIdentifier(machineID),
		vzf.WithMacAuxiliaryStorage(aux),
	)
	if err != nil {
		return nil, err
	}
	cfg, err := vzf.NewVirtualMachineConfiguration(boot, spec.CPUCount, spec.MemoryBytes)
	if err != nil {
		return nil, err
	}
	cfg.SetPlatformVirtualMachineConfiguration(platform)

	disk, err := vzf.NewDiskImageStorageDeviceAttachment(spec.DiskPath, false)
	if err != nil {
		return nil, err
	}
	block, err := vzf.NewVirtioBlockDeviceConfiguration(disk)
	if err != nil {
		return nil, err
	}
	cfg.SetStorageDevicesVirtualMachineConfiguration([]vzf.StorageDeviceConfiguration{block})

	nat, err := vzf.NewNATNetworkDeviceAttachment()
	if err != nil {
		return nil, err
	}
	nic, err := vzf.NewVirtioNetworkDeviceConfiguration(nat)
	if err != nil {
		return nil, err
	}
	hw, err := spec.HardwareAddr()
	if err != nil {
		return nil, err
	}
	mac, err := vzf.NewMACAddress(hw)
	if err != nil {
		return nil, err
	}
	nic.SetMACAddress(mac)
	cfg.SetNetworkDevicesVirtualMachineConfiguration([]*vzf.VirtioNetworkDeviceConfiguration{nic})

	if spec.Vsock {
		sock, err := vzf.NewVirtioSocketDeviceConfiguration()
		if err != nil {
			return nil, err
		}
		cfg.SetSocketDevicesVirtualMachineConfiguration([]vzf.SocketDeviceConfiguration{sock})
	}

	entropy, err := vzf.NewVirtioEntropyDeviceConfiguration()
	if err != nil {
		return nil, err
	}
	cfg.SetEntropyDevicesVirtualMachineConfiguration([]*vzf.VirtioEntropyDeviceConfiguration{entropy})

	graphics, err := vzf.NewMacGraphicsDeviceConfiguration()
	if err != nil {
		return nil, err
	}
	display, err := vzf.NewMacGraphicsDisplayConfiguration(spec.Display.WidthPixels, spec.Display.HeightPixels, spec.Display.PixelsPerInch)
	if err != nil {
		return nil, err
	}
	graphics.SetDisplays(display)
	cfg.SetGraphicsDevicesVirtualMachineConfiguration([]vzf.GraphicsDeviceConfiguration{graphics})
	return &rendered{config: cfg, platform: platform, mac: mac}, nil
}

// VM is a Virtualization.framework VM.
type VM struct {
	vm   *vzf.VirtualMachine
	spec vmspec.VMSpec
	opts options
	log  logr.Logger

	// lastStop is how Stop last brought the VM down since its last start;
	// empty when the guest went down by itself.
	mu       sync.Mutex
	lastStop driver.StopMethod
}

var (
	_ driver.VM           = (*VM)(nil)
	_ driver.StopReporter = (*VM)(nil)
)

// LastStopMethod implements driver.StopReporter.
func (v *VM) LastStopMethod() driver.StopMethod {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastStop
}

func (v *VM) setLastStop(m driver.StopMethod) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.lastStop = m
}

// Start implements driver.VM. A start over the host's quota fails with
// code 6, driver.CodeVirtualMachineLimitExceeded.
func (v *VM) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// The framework's start has no cancellation; it returns once the VM runs.
	if err := v.vm.Start(); err != nil {
		return fmt.Errorf("starting VM %s: %w", v.spec.Name, mapError(err))
	}
	v.setLastStop("")
	return nil
}

// Stop implements driver.VM: RequestStop, then Stop once graceful is over.
func (v *VM) Stop(ctx context.Context, graceful time.Duration) error {
	if v.stopped() {
		return nil
	}
	if graceful > 0 && v.vm.CanRequestStop() {
		if _, err := v.vm.RequestStop(); err != nil {
			v.log.Error(mapError(err), "Guest stop request failed; forcing")
		} else if v.waitStopped(ctx, graceful) {
			v.setLastStop(driver.StopRequestStop)
			v.log.Info("VM stopped", "stop", "graceful")
			return nil
		}
	}
	if v.stopped() {
		return nil
	}
	if !v.vm.CanStop() {
		return &driver.VZError{Domain: driver.DomainVZ, Code: driver.CodeInvalidVirtualMachineStateTransition,
			Message: fmt.Sprintf("cannot stop a VM that is %s", v.State())}
	}
	if err := v.vm.Stop(); err != nil {
		return fmt.Errorf("stopping VM %s: %w", v.spec.Name, mapError(err))
	}
	v.setLastStop(driver.StopForced)
	v.log.Info("VM stopped", "stop", "forced")
	return nil
}

func (v *VM) stopped() bool {
	s := v.vm.State()
	return s == vzf.VirtualMachineStateStopped || s == vzf.VirtualMachineStateError
}

// waitStopped polls until the VM stops, graceful passes or ctx ends.
func (v *VM) waitStopped(ctx context.Context, graceful time.Duration) bool {
	deadline := v.opts.clock.NewTimer(graceful)
	defer deadline.Stop()
	tick := v.opts.clock.NewTicker(pollInterval)
	defer tick.Stop()
	for !v.stopped() {
		select {
		case <-deadline.C():
			return v.stopped()
		case <-ctx.Done():
			return v.stopped()
		case <-tick.C():
		}
	}
	return true
}

// State implements driver.VM.
func (v *VM) State() driver.State {
	switch v.vm.State() {
	case vzf.VirtualMachineStateStopped:
		return driver.StateStopped
	case vzf.VirtualMachineStateStarting:
		return driver.StateStarting
	case vzf.VirtualMachineStateRunning:
		return driver.StateRunning
	case vzf.VirtualMachineStateStopping:
		return driver.StateStopping
	case vzf.VirtualMachineStateError:
		return driver.StateError
	default:
		return driver.StatePaused
	}
}

// DialGuest implements driver.VM through the VM's VirtioSocketDevice.
func (v *VM) DialGuest(ctx context.Context, port uint32) (net.Conn, error) {
	if v.vm.State() != vzf.VirtualMachineStateRunning {
		return nil, fmt.Errorf("dialing guest port %d of %s: %w (%s)", port, v.spec.Name, driver.ErrNotRunning, v.State())
	}
	devices := v.vm.SocketDevices()
	if len(devices) == 0 {
		return nil, fmt.Errorf("dialing guest port %d of %s: %w", port, v.spec.Name, driver.ErrNoVsock)
	}
	type result struct {
		conn *vzf.VirtioSocketConnection
		err  error
	}
	// Connect cannot be cancelled; a connection that arrives after ctx
	// ended is closed.
	ch := make(chan result, 1)
	go func() {
		conn, err := devices[0].Connect(port)
		ch <- result{conn, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("dialing guest port %d of %s: %w", port, v.spec.Name, mapError(r.err))
		}
		return r.conn, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("dialing guest port %d of %s: %w", port, v.spec.Name, ctx.Err())
	}
}

// mapError turns the framework's NSError into a driver.VZError, so that
// code 6 (the host's VM quota) reads the same from every driver.
func mapError(err error) error {
	var ns *vzf.NSError
	if errors.As(err, &ns) {
		return &driver.VZError{Domain: ns.Domain, Code: ns.Code, Message: ns.LocalizedDescription}
	}
	return err
}
