// Package vmspec renders a MacOSInstance and its MacOSImage into a VMSpec:
// every decision about the VM's virtual hardware, in plain Go, so that it is
// unit-tested on Linux and the darwin adapter only applies it. A VMSpec is
// JSON, because it crosses the vm-helper socket.
package vmspec

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"path/filepath"

	"k8s.io/apimachinery/pkg/api/resource"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// BootLoader is how the VM boots.
type BootLoader string

// BootLoaderMacOS boots macOS on Apple silicon from the auxiliary storage;
// the only boot loader a MacRack VM has.
const BootLoaderMacOS BootLoader = "macOS"

// Network is how the VM's network device is attached.
type Network string

// NetworkNAT puts the VM behind the host's NAT.
const NetworkNAT Network = "nat"

// Limits Render enforces.
const (
	// MinCPU and MaxCPU bound the vCPU count; MaxCPU matches the CRD.
	MinCPU = 1
	MaxCPU = 64
	// MinMemoryBytes is below what current macOS guests boot with.
	MinMemoryBytes = 4 << 30
	// memoryGranule: Virtualization.framework wants whole MiB.
	memoryGranule = 1 << 20
)

// Display is the guest's one display. macOS guests want a graphics device,
// for WindowServer and for the simulators' Metal.
type Display struct {
	WidthPixels   int64 `json:"widthPixels"`
	HeightPixels  int64 `json:"heightPixels"`
	PixelsPerInch int64 `json:"pixelsPerInch"`
}

// DefaultDisplay is the display every VM gets.
func DefaultDisplay() Display {
	return Display{WidthPixels: 1920, HeightPixels: 1080, PixelsPerInch: 80}
}

// Paths are the instance's own files on the host, prepared by the caller
// before Render: the disk cloned from the image and grown to the instance's
// size, and the auxiliary storage cloned from the image's template.
type Paths struct {
	Disk             string
	AuxiliaryStorage string
}

// VMSpec is everything the darwin adapter needs to build and boot one VM.
type VMSpec struct {
	// Name is namespace/name of the instance, for logs.
	Name string `json:"name"`
	// UID is the instance's UID; it names the helper and seeds the MAC.
	UID         string `json:"uid"`
	CPUCount    uint   `json:"cpuCount"`
	MemoryBytes uint64 `json:"memoryBytes"`
	// DiskPath is a raw disk image of at least DiskBytes.
	DiskPath  string `json:"diskPath"`
	DiskBytes uint64 `json:"diskBytes"`

	BootLoader BootLoader `json:"bootLoader"`
	// HardwareModel is the decoded VZMacHardwareModel data representation.
	HardwareModel []byte `json:"hardwareModel"`
	// MachineIdentifier is the VZMacMachineIdentifier data representation,
	// stable for the instance's life.
	MachineIdentifier    []byte `json:"machineIdentifier"`
	AuxiliaryStoragePath string `json:"auxiliaryStoragePath"`

	Network Network `json:"network"`
	// MACAddress is in net.HardwareAddr's colon form.
	MACAddress string `json:"macAddress"`
	// Vsock adds a VirtioSocketDevice, the guest agent's channel.
	Vsock   bool    `json:"vsock"`
	Display Display `json:"display"`
}

// Render builds the VMSpec of inst booting img, with the instance's files at
// paths and its persisted machineID. It rejects what the VM could not boot
// with, naming the field.
func Render(inst *computev1alpha1.MacOSInstance, img *fleetv1alpha1.MacOSImage, paths Paths, machineID []byte) (VMSpec, error) {
	if inst == nil || img == nil {
		return VMSpec{}, ErrMissingObject
	}
	if inst.Spec.ImageName != img.Name {
		return VMSpec{}, fmt.Errorf("%w: instance wants image %q, got %q", ErrImageMismatch, inst.Spec.ImageName, img.Name)
	}
	if inst.UID == "" {
		return VMSpec{}, fmt.Errorf("%w: instance %s/%s has no UID", ErrName, inst.Namespace, inst.Name)
	}
	cpu := inst.Spec.CPU
	if cpu < MinCPU || cpu > MaxCPU {
		return VMSpec{}, fmt.Errorf("%w: %d is outside [%d, %d]", ErrCPU, cpu, MinCPU, MaxCPU)
	}
	memory, err := bytesOf(inst.Spec.Memory, "memory", ErrMemory)
	if err != nil {
		return VMSpec{}, err
	}
	disk, err := bytesOf(inst.Spec.Disk, "disk", ErrDisk)
	if err != nil {
		return VMSpec{}, err
	}
	need, ok := img.MinimumDisk()
	if !ok {
		return VMSpec{}, fmt.Errorf("%w: image %s is not resolved from its artifact yet", ErrImageUnresolved, img.Name)
	}
	if inst.Spec.Disk.Cmp(need) < 0 {
		return VMSpec{}, fmt.Errorf("%w: disk %s is smaller than image %s's %s",
			ErrDisk, inst.Spec.Disk.String(), img.Name, need.String())
	}
	if img.Status.Resolved.HardwareModel == "" {
		return VMSpec{}, fmt.Errorf("%w: image %s has none", ErrHardwareModel, img.Name)
	}
	model, err := base64.StdEncoding.DecodeString(img.Status.Resolved.HardwareModel)
	if err != nil {
		return VMSpec{}, fmt.Errorf("%w: image %s: %w", ErrHardwareModel, img.Name, err)
	}
	spec := VMSpec{
		Name:                 inst.Namespace + "/" + inst.Name,
		UID:                  string(inst.UID),
		CPUCount:             uint(cpu),
		MemoryBytes:          memory,
		DiskPath:             paths.Disk,
		DiskBytes:            disk,
		BootLoader:           BootLoaderMacOS,
		HardwareModel:        model,
		MachineIdentifier:    append([]byte(nil), machineID...),
		AuxiliaryStoragePath: paths.AuxiliaryStorage,
		Network:              NetworkNAT,
		MACAddress:           MACAddress(string(inst.UID)).String(),
		Vsock:                true,
		Display:              DefaultDisplay(),
	}
	if err := spec.Validate(); err != nil {
		return VMSpec{}, err
	}
	return spec, nil
}

// bytesOf is q in bytes; a quantity that is not a positive int64 is an error.
func bytesOf(q resource.Quantity, field string, sentinel error) (uint64, error) {
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return 0, fmt.Errorf("%w: %s %s is not a positive whole number of bytes", sentinel, field, q.String())
	}
	return uint64(n), nil
}

// Validate checks a spec on its own, as the helper does with one received
// over its socket.
func (s VMSpec) Validate() error {
	if s.Name == "" || s.UID == "" {
		return fmt.Errorf("%w: name %q, uid %q", ErrName, s.Name, s.UID)
	}
	if s.CPUCount < MinCPU || s.CPUCount > MaxCPU {
		return fmt.Errorf("%w: %d is outside [%d, %d]", ErrCPU, s.CPUCount, MinCPU, MaxCPU)
	}
	if s.MemoryBytes < MinMemoryBytes {
		return fmt.Errorf("%w: %d bytes is below the minimum %d (4Gi)", ErrMemory, s.MemoryBytes, MinMemoryBytes)
	}
	if s.MemoryBytes%memoryGranule != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of MiB", ErrMemory, s.MemoryBytes)
	}
	if s.DiskBytes == 0 {
		return fmt.Errorf("%w: zero bytes", ErrDisk)
	}
	for _, p := range []struct{ field, path string }{
		{"disk", s.DiskPath}, {"auxiliary storage", s.AuxiliaryStoragePath},
	} {
		if !filepath.IsAbs(p.path) {
			return fmt.Errorf("%w: %s path %q is not absolute", ErrPath, p.field, p.path)
		}
	}
	if s.BootLoader != BootLoaderMacOS {
		return fmt.Errorf("%w: boot loader %q", ErrDevice, s.BootLoader)
	}
	if len(s.HardwareModel) == 0 {
		return fmt.Errorf("%w: empty", ErrHardwareModel)
	}
	if len(s.MachineIdentifier) == 0 {
		return fmt.Errorf("%w: empty", ErrMachineIdentifier)
	}
	if s.Network != NetworkNAT {
		return fmt.Errorf("%w: network %q", ErrDevice, s.Network)
	}
	if _, err := s.HardwareAddr(); err != nil {
		return err
	}
	d := s.Display
	if d.WidthPixels <= 0 || d.HeightPixels <= 0 || d.PixelsPerInch <= 0 {
		return fmt.Errorf("%w: display %dx%d at %d ppi", ErrDevice, d.WidthPixels, d.HeightPixels, d.PixelsPerInch)
	}
	return nil
}

// HardwareAddr parses MACAddress and checks it is a unicast, locally
// administered EUI-48: one that no vendor owns.
func (s VMSpec) HardwareAddr() (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s.MACAddress)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMACAddress, err)
	}
	if len(mac) != 6 || mac[0]&0x01 != 0 || mac[0]&0x02 == 0 {
		return nil, fmt.Errorf("%w: %s is not a unicast, locally administered EUI-48", ErrMACAddress, s.MACAddress)
	}
	return mac, nil
}

// MACAddress derives the VM's MAC from the instance UID: stable across
// restarts, so the guest keeps its DHCP lease, and different per instance.
func MACAddress(uid string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("macrack.io/mac/" + uid))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	return mac
}
