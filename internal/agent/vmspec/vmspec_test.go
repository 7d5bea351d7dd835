package vmspec

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

var (
	model     = []byte("bplist00-hardware-model")
	machineID = []byte("bplist00-machine-identifier")
	paths     = Paths{Disk: "/var/lib/macrack/instances/u1/disk.img", AuxiliaryStorage: "/var/lib/macrack/instances/u1/aux.img"}
)

func instance() *computev1alpha1.MacOSInstance {
	return &computev1alpha1.MacOSInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "ci-1", UID: "3f1c7a52-8d7e-4f7b-9a57-2b1f0f6c1d11"},
		Spec: computev1alpha1.MacOSInstanceSpec{
			LeaseName: "lease-1", ImageName: "sequoia-xcode16",
			CPU: 4, Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("200Gi"),
		},
	}
}

func image() *fleetv1alpha1.MacOSImage {
	return &fleetv1alpha1.MacOSImage{
		ObjectMeta: metav1.ObjectMeta{Name: "sequoia-xcode16"},
		Spec:       fleetv1alpha1.MacOSImageSpec{Source: "store.example/sequoia@sha256:" + strings.Repeat("ab12", 16)},
		Status: fleetv1alpha1.MacOSImageStatus{Resolved: &fleetv1alpha1.ResolvedImage{
			Digest: "sha256:" + strings.Repeat("ab12", 16), MacOSVersion: "15.5", XcodeVersions: []string{"16.4"},
			MinimumDisk: resource.MustParse("120Gi"), DiskSize: resource.MustParse("120Gi"),
			HardwareModel: base64.StdEncoding.EncodeToString(model),
		}},
	}
}

func TestRenderBuildsTheWholeSpec(t *testing.T) {
	got, err := Render(instance(), image(), paths, machineID)
	if err != nil {
		t.Fatal(err)
	}
	want := VMSpec{
		Name: "tenant-a/ci-1", UID: "3f1c7a52-8d7e-4f7b-9a57-2b1f0f6c1d11",
		CPUCount: 4, MemoryBytes: 8 << 30,
		DiskPath: paths.Disk, DiskBytes: 200 << 30,
		BootLoader: BootLoaderMacOS, HardwareModel: model, MachineIdentifier: machineID,
		AuxiliaryStoragePath: paths.AuxiliaryStorage,
		Network:              NetworkNAT, MACAddress: MACAddress("3f1c7a52-8d7e-4f7b-9a57-2b1f0f6c1d11").String(),
		Vsock: true, Display: DefaultDisplay(),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestRenderCopiesTheMachineIdentifier(t *testing.T) {
	id := []byte("id")
	got, err := Render(instance(), image(), paths, id)
	if err != nil {
		t.Fatal(err)
	}
	id[0] = 'X'
	if string(got.MachineIdentifier) != "id" {
		t.Fatalf("the spec aliases the caller's slice: %q", got.MachineIdentifier)
	}
}

// TestRenderRejects: the agent builds no VM from an instance it cannot run
// as written, whatever the API server admitted.
// Proves: instance.image
func TestRenderRejects(t *testing.T) {
	cases := []struct {
		name      string
		inst      func(*computev1alpha1.MacOSInstance) *computev1alpha1.MacOSInstance
		img       func(*fleetv1alpha1.MacOSImage) *fleetv1alpha1.MacOSImage
		paths     Paths
		machineID []byte
		want      error
	}{
		{name: "a nil instance is refused",
			inst: func(*computev1alpha1.MacOSInstance) *computev1alpha1.MacOSInstance { return nil }, want: ErrMissingObject},
		{name: "a nil image is refused",
			img: func(*fleetv1alpha1.MacOSImage) *fleetv1alpha1.MacOSImage { return nil }, want: ErrMissingObject},
		{name: "an image other than the instance's is refused",
			img: func(i *fleetv1alpha1.MacOSImage) *fleetv1alpha1.MacOSImage { i.Name = "other"; return i }, want: ErrImageMismatch},
		{name: "an instance without a UID has no MAC address to derive",
			inst: func(i *computev1alpha1.MacOSInstance) *computev1alpha1.MacOSInstance { i.UID = ""; return i }, want: ErrName},
		{name: "zero CPUs are refused",
			inst: func(i *computev1alpha1.MacOSInstance) *computev1alpha1.MacOSInstance { i.Spec.CPU = 0; return i }, want: ErrCPU},
		{name: "negative CPUs are refused",
			inst: func(i *computev1alpha1.MacOSInstance) *computev1alpha1.MacOSInstance { i.Spec.CPU = -2; return i }, want: ErrCPU},
		{name: "more CPUs than the CRD allows are refused",
			inst: func(i *computev1alpha1.MacOSInstance) *computev1alpha1.MacOSInstance { i.Spec.CPU = 65; return i }, want: ErrCPU},
		{name: "memory below 4Gi is refused",
			inst: func(i *computev1alpha1.MacOSInstance) *computev1alpha1.MacOSInstance {
				i.Spec.Memory = resource.MustParse("3Gi")
				return i
			}, want: ErrMemory},
		{name: "memory that is not whole MiB is refused",
			inst: func(i *computev1alpha1.MacOSInstance) *computev1alpha1.MacOSInstance {
				i.Spec.Memory = resource.MustParse("5000000000")
				return i
			}, want: ErrMemory},
		{name: "fractional memory is refused",
			inst: func(i *computev1alpha1.MacOSInstance) *computev1alpha1.MacOSInstance {
				i.Spec.Memory = resource.MustParse("500m")
				return i
			}, want: ErrMemory},
		{name: "zero disk is refused",
			inst: func(i *computev1alpha1.MacOSInstance) *computev1alpha1.MacOSInstance {
				i.Spec.Disk = resource.MustParse("0")
				return i
			}, want: ErrDisk},
		{name: "a disk smaller than the image is refused",
			inst: func(i *computev1alpha1.MacOSInstance) *computev1alpha1.MacOSInstance {
				i.Spec.Disk = resource.MustParse("100Gi")
				return i
			}, want: ErrDisk},
		{name: "a hardware model that is not base64 is refused",
			img: func(i *fleetv1alpha1.MacOSImage) *fleetv1alpha1.MacOSImage {
				i.Status.Resolved.HardwareModel = "not*base64!"
				return i
			}, want: ErrHardwareModel},
		{name: "an empty hardware model is refused",
			img: func(i *fleetv1alpha1.MacOSImage) *fleetv1alpha1.MacOSImage {
				i.Status.Resolved.HardwareModel = ""
				return i
			}, want: ErrHardwareModel},
		{name: "an image not resolved from its artifact is refused",
			img: func(i *fleetv1alpha1.MacOSImage) *fleetv1alpha1.MacOSImage { i.Status.Resolved = nil; return i }, want: ErrImageUnresolved},
		{name: "a missing machine identifier is refused", machineID: []byte{}, want: ErrMachineIdentifier},
		{name: "a relative disk path is refused",
			paths: Paths{Disk: "disk.img", AuxiliaryStorage: paths.AuxiliaryStorage}, want: ErrPath},
		{name: "a missing auxiliary storage path is refused",
			paths: Paths{Disk: paths.Disk}, want: ErrPath},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inst, img, p, id := instance(), image(), paths, machineID
			if c.inst != nil {
				inst = c.inst(inst)
			}
			if c.img != nil {
				img = c.img(img)
			}
			if c.paths != (Paths{}) {
				p = c.paths
			}
			if c.machineID != nil {
				id = c.machineID
			}
			_, err := Render(inst, img, p, id)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

func TestValidateRejects(t *testing.T) {
	good, err := Render(instance(), image(), paths, machineID)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		mutate func(*VMSpec)
		want   error
	}{
		{"a spec without a name is refused", func(s *VMSpec) { s.Name = "" }, ErrName},
		{"a spec without a UID is refused", func(s *VMSpec) { s.UID = "" }, ErrName},
		{"zero CPUs are refused", func(s *VMSpec) { s.CPUCount = 0 }, ErrCPU},
		{"memory below the minimum is refused", func(s *VMSpec) { s.MemoryBytes = MinMemoryBytes - memoryGranule }, ErrMemory},
		{"memory off the MiB grid is refused", func(s *VMSpec) { s.MemoryBytes = MinMemoryBytes + 1 }, ErrMemory},
		{"a zero disk is refused", func(s *VMSpec) { s.DiskBytes = 0 }, ErrDisk},
		{"an unknown boot loader is refused", func(s *VMSpec) { s.BootLoader = "linux" }, ErrDevice},
		{"an empty hardware model is refused", func(s *VMSpec) { s.HardwareModel = nil }, ErrHardwareModel},
		{"an empty machine identifier is refused", func(s *VMSpec) { s.MachineIdentifier = nil }, ErrMachineIdentifier},
		{"an unknown network is refused", func(s *VMSpec) { s.Network = "bridged" }, ErrDevice},
		{"an unparsable MAC address is refused", func(s *VMSpec) { s.MACAddress = "nope" }, ErrMACAddress},
		{"a multicast MAC address is refused", func(s *VMSpec) { s.MACAddress = "03:00:00:00:00:01" }, ErrMACAddress},
		{"a vendor MAC address is refused", func(s *VMSpec) { s.MACAddress = "a4:83:e7:00:00:01" }, ErrMACAddress},
		{"a 64-bit MAC address is refused", func(s *VMSpec) { s.MACAddress = "02:00:00:00:00:00:00:01" }, ErrMACAddress},
		{"a display without pixels is refused", func(s *VMSpec) { s.Display.WidthPixels = 0 }, ErrDevice},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := good
			c.mutate(&s)
			if err := s.Validate(); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

func TestSpecSurvivesJSON(t *testing.T) {
	spec, err := Render(instance(), image(), paths, machineID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var back VMSpec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, spec) {
		t.Fatalf("round trip changed the spec:\n%+v\n%+v", back, spec)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	if fields["hardwareModel"] != base64.StdEncoding.EncodeToString(model) || fields["cpuCount"] != 4.0 {
		t.Fatalf("unexpected wire form: %s", b)
	}
}

func TestMACAddress(t *testing.T) {
	a1, a2, b := MACAddress("uid-a"), MACAddress("uid-a"), MACAddress("uid-b")
	if a1.String() != a2.String() {
		t.Fatalf("the same UID gave %s and %s", a1, a2)
	}
	if a1.String() == b.String() {
		t.Fatalf("two UIDs share %s", a1)
	}
	for _, mac := range []string{a1.String(), b.String()} {
		if _, err := (VMSpec{MACAddress: mac}).HardwareAddr(); err != nil {
			t.Fatalf("derived MAC %s: %v", mac, err)
		}
	}
}
