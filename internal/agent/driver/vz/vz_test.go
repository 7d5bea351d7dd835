//go:build darwin && arm64

package vz

// The agent-unit tier, on a Mac (.github/workflows/macos.yml): a VMSpec
// rendered into a VZVirtualMachineConfiguration, and validated where this
// host runs VMs. No VM starts. On Linux hack/darwincheck type-checks this
// file against the real vz API.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	vzf "github.com/Code-Hex/vz/v3"
	"howett.net/plist"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// genericHardwareModel is the VZMacHardwareModel data representation that
// restore images of macOS 13 and later share on Apple silicon: a binary
// plist, the same in every such VM, not a machine's identity. A golden
// carries its own (MacOSImage.status.resolved.hardwareModel); hosted
// runners have no restore image to read one from.
func genericHardwareModel(t *testing.T) []byte {
	t.Helper()
	b, err := plist.Marshal(map[string]any{
		"DataRepresentationVersion": 1,
		"MinimumSupportedOS":        []int{13, 0, 0},
		"PlatformVersion":           2,
	}, plist.BinaryFormat)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testSpec is a VMSpec as vmspec.Render makes one, over files in a
// temporary directory: a sparse 64 MiB disk and an empty auxiliary storage
// (render opens both; only validation reads the storage).
func testSpec(t *testing.T) vmspec.VMSpec {
	t.Helper()
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.img")
	f, err := os.Create(disk)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	aux := filepath.Join(dir, "aux.img")
	if err := os.WriteFile(aux, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	machineID, err := NewMachineIdentifier()
	if err != nil {
		t.Fatal(err)
	}
	const uid = "5f0c9a52-7d1e-4c55-9b1e-0d6f1e2a3b4c"
	spec := vmspec.VMSpec{
		Name: "tenant-a/ci-1", UID: uid, CPUCount: 2, MemoryBytes: 4 << 30,
		DiskPath: disk, DiskBytes: 64 << 20, BootLoader: vmspec.BootLoaderMacOS,
		HardwareModel: genericHardwareModel(t), MachineIdentifier: machineID, AuxiliaryStoragePath: aux,
		Network: vmspec.NetworkNAT, MACAddress: vmspec.MACAddress(uid).String(), Vsock: true,
		Display: vmspec.DefaultDisplay(),
	}
	if err := spec.Validate(); err != nil {
		t.Fatalf("the test's own spec: %v", err)
	}
	return spec
}

// decodePlist decodes a data representation, which the framework may
// re-encode: equal content, not equal bytes, is what round-trips.
func decodePlist(t *testing.T, what string, b []byte) any {
	t.Helper()
	var v any
	if _, err := plist.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s's data representation is not a property list: %v", what, err)
	}
	return v
}

func TestAVMSpecRendersIntoAConfiguration(t *testing.T) {
	spec := testSpec(t)
	r, err := render(spec)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	if got, want := decodePlist(t, "the hardware model", r.platform.HardwareModel().DataRepresentation()),
		decodePlist(t, "the spec's hardware model", spec.HardwareModel); !reflect.DeepEqual(got, want) {
		t.Errorf("hardware model %v, want %v", got, want)
	}
	if got, want := decodePlist(t, "the machine identifier", r.platform.MachineIdentifier().DataRepresentation()),
		decodePlist(t, "the spec's machine identifier", spec.MachineIdentifier); !reflect.DeepEqual(got, want) {
		t.Errorf("machine identifier %v, want %v", got, want)
	}
	if got := r.platform.AuxiliaryStorage(); got == nil {
		t.Error("no auxiliary storage")
	}
	if got := r.mac.String(); !strings.EqualFold(got, spec.MACAddress) {
		t.Errorf("MAC address %s, want %s", got, spec.MACAddress)
	}
	if n := len(r.config.StorageDevices()); n != 1 {
		t.Errorf("%d storage devices, want the instance's disk alone", n)
	}
	nics := r.config.NetworkDevices()
	if len(nics) != 1 {
		t.Fatalf("%d network devices, want 1", len(nics))
	}
	if _, ok := nics[0].Attachment().(*vzf.NATNetworkDeviceAttachment); !ok {
		t.Errorf("the NIC is attached by %T, want NAT", nics[0].Attachment())
	}
	if n := len(r.config.SocketDevices()); n != 1 {
		t.Errorf("%d vsock devices, want 1: the guest agent's channel", n)
	}

	spec.Vsock = false
	r, err = render(spec)
	if err != nil {
		t.Fatalf("render without vsock: %v", err)
	}
	if n := len(r.config.SocketDevices()); n != 0 {
		t.Errorf("%d vsock devices for a spec without one", n)
	}
}

func TestNewVMRefusesAnInvalidSpecBeforeTheFramework(t *testing.T) {
	spec := testSpec(t)
	spec.MemoryBytes = 1 << 30
	_, err := New().NewVM(spec)
	var vzErr *driver.VZError
	if !errors.As(err, &vzErr) || vzErr.Code != driver.CodeInvalidVirtualMachineConfiguration {
		t.Fatalf("NewVM with 1 GiB: %v, want code %d", err, driver.CodeInvalidVirtualMachineConfiguration)
	}
}

// vmSupported asks Virtualization.framework itself whether this host runs
// VMs (VZVirtualMachine.isSupported), through the Swift of the Command Line
// Tools that built this test: vz does not wrap it, and the module keeps no
// cgo of its own (hack/darwincheck fails on any).
func vmSupported(t *testing.T) bool {
	t.Helper()
	script := filepath.Join(t.TempDir(), "supported.swift")
	if err := os.WriteFile(script, []byte("import Virtualization\nprint(VZVirtualMachine.isSupported)\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/xcrun", "swift", script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("asking VZVirtualMachine.isSupported: %v: %s", err, stderr.String())
	}
	switch v := strings.TrimSpace(string(out)); v {
	case "true":
		return true
	case "false":
		return false
	default:
		t.Fatalf("VZVirtualMachine.isSupported printed %q", v)
	}
	return false
}

func TestTheConfigurationValidatesWhereThisHostRunsVMs(t *testing.T) {
	if !vmSupported(t) {
		t.Skip("VZVirtualMachine.isSupported is false on this host, as on a hosted runner without nested " +
			"virtualisation: validating a macOS guest's configuration needs a host that runs VMs")
	}
	spec := testSpec(t)
	model, err := vzf.NewMacHardwareModelWithData(spec.HardwareModel)
	if err != nil {
		t.Fatal(err)
	}
	if !model.Supported() {
		t.Fatal("a host that runs VMs does not support the generic macOS 13 hardware model")
	}
	if err := os.Remove(spec.AuxiliaryStoragePath); err != nil {
		t.Fatal(err)
	}
	if _, err := vzf.NewMacAuxiliaryStorage(spec.AuxiliaryStoragePath, vzf.WithCreatingMacAuxiliaryStorage(model)); err != nil {
		t.Fatalf("creating the auxiliary storage: %v", err)
	}
	if _, err := configure(spec); err != nil {
		t.Fatalf("validating the rendered configuration: %v (a test binary not signed with "+
			"deploy/macos/macrack.entitlements is refused)", err)
	}

	// The control: the framework, not render, refuses more CPUs than the host has.
	spec.CPUCount = uint(runtime.NumCPU() + 1)
	_, err = configure(spec)
	var ns *vzf.NSError
	if !errors.As(err, &ns) {
		t.Fatalf("%d vCPUs on a %d-CPU host: %v, want the framework's NSError", spec.CPUCount, runtime.NumCPU(), err)
	}
}
