package host

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// capture reads one command's captured output from testdata/darwin.
func capture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "darwin", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseCSRUtilStatus(t *testing.T) {
	for _, tc := range []struct {
		file, state      string
		enabled, custom  bool
		disabled         []string
		reasonMentioning string
	}{
		{file: "csrutil-status-enabled.txt", state: "enabled", enabled: true},
		{file: "csrutil-status-disabled.txt", state: "disabled", reasonMentioning: `"disabled"`},
		{file: "csrutil-status-custom.txt", state: "unknown (Custom Configuration)", custom: true,
			disabled: []string{"Apple Internal", "Filesystem Protections"}, reasonMentioning: "Filesystem Protections"},
		// A custom configuration that calls itself enabled is not enabled.
		{file: "csrutil-status-enabled-custom.txt", state: "enabled (Custom Configuration)", custom: true,
			disabled: []string{"Apple Internal", "Debugging Restrictions"}, reasonMentioning: "Debugging Restrictions"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			st, err := ParseCSRUtilStatus(capture(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if st.State != tc.state || st.Enabled != tc.enabled || st.Custom != tc.custom || !reflect.DeepEqual(st.Disabled, tc.disabled) {
				t.Fatalf("got %+v", st)
			}
			if tc.enabled && st.Reason() != "" {
				t.Fatalf("an enabled SIP has a reason: %q", st.Reason())
			}
			if !tc.enabled && !strings.Contains(st.Reason(), tc.reasonMentioning) {
				t.Fatalf("the reason %q does not mention %q", st.Reason(), tc.reasonMentioning)
			}
		})
	}
}

func TestParseCSRUtilStatusWithoutAStatusLineIsUnknown(t *testing.T) {
	for _, out := range []string{"", "csrutil: failed to query the SIP configuration\n", "enabled.\n"} {
		if st, err := ParseCSRUtilStatus(out); err == nil {
			t.Errorf("%q parsed as %+v, want an error", out, st)
		}
	}
}

func TestParseSysctlBootArgs(t *testing.T) {
	for file, want := range map[string]string{
		"sysctl-kern.bootargs-unset.txt": "",
		"sysctl-kern.bootargs-set.txt":   "-v keepsyms=1",
	} {
		got, err := ParseSysctlBootArgs(capture(t, file))
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", file, got, err, want)
		}
	}
	// A quota boot-arg is reported verbatim, for the policy to refuse.
	quota := "hv_apple_isa" + "_vm_quota" + "=0xff"
	if got, err := ParseSysctlBootArgs("-v " + quota + "\n"); err != nil || got != "-v "+quota {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := ParseSysctlBootArgs("-v\nsecond line\n"); err == nil {
		t.Error("two lines parsed")
	}
	if _, err := ParseSysctlBootArgs(strings.Repeat("x", 1025)); err == nil {
		t.Error("boot-args over 1024 bytes parsed")
	}
}

func TestParseNVRAMBootArgs(t *testing.T) {
	got, err := ParseNVRAMBootArgs(capture(t, "nvram-boot-args-set.stdout.txt"), "")
	if err != nil || got != "-v keepsyms=1" {
		t.Errorf("set: got %q, %v", got, err)
	}
	// Unset, nvram exits 1 with "data was not found": no boot-args.
	got, err = ParseNVRAMBootArgs("", capture(t, "nvram-boot-args-unset.stderr.txt"))
	if err != nil || got != "" {
		t.Errorf("unset: got %q, %v", got, err)
	}
	// nvram prints a byte it cannot show as %xx.
	if got, err := ParseNVRAMBootArgs("boot-args\t-v%09serial=3\n", ""); err != nil || got != "-v\tserial=3" {
		t.Errorf("escaped: got %q, %v", got, err)
	}
	for _, stderr := range []string{"", "nvram: Error getting variable - 'boot-args': (iokit/common) not permitted\n"} {
		if got, err := ParseNVRAMBootArgs("", stderr); err == nil {
			t.Errorf("stderr %q parsed as %q, want an error", stderr, got)
		}
	}
}

func TestParseSwVersProductVersion(t *testing.T) {
	if got, err := ParseSwVersProductVersion(capture(t, "sw_vers-productVersion.txt")); err != nil || got != "15.5" {
		t.Errorf("got %q, %v", got, err)
	}
	if got, err := ParseSwVersProductVersion("26.0.1\n"); err != nil || got != "26.0.1" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := ParseSwVersProductVersion("ProductName:\tmacOS\n"); err == nil {
		t.Error("a sw_vers without -productVersion parsed")
	}
}

func TestParseChip(t *testing.T) {
	for file, want := range map[string]string{
		"sysctl-machdep.cpu.brand_string-m4.txt":    "M4",
		"sysctl-machdep.cpu.brand_string-m4pro.txt": "M4 Pro",
	} {
		if got, err := ParseChip(capture(t, file)); err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", file, got, err, want)
		}
	}
	if got, _ := ParseChip("Intel(R) Core(TM) i7-8700B CPU @ 3.20GHz\n"); got != "Intel(R) Core(TM) i7-8700B CPU @ 3.20GHz" {
		t.Errorf("another brand: got %q", got)
	}
	if _, err := ParseChip("\n"); err == nil {
		t.Error("an empty brand parsed")
	}
}

func TestParseMemSize(t *testing.T) {
	q, err := ParseMemSize(capture(t, "sysctl-hw.memsize-16g.txt"))
	if err != nil || q.String() != "16Gi" {
		t.Fatalf("got %v, %v", q, err)
	}
	for _, out := range []string{"", "0\n", "-1\n", "16G\n"} {
		if _, err := ParseMemSize(out); err == nil {
			t.Errorf("%q parsed", out)
		}
	}
}

func TestParseBootSessionUUID(t *testing.T) {
	got, err := ParseBootSessionUUID(capture(t, "sysctl-kern.bootsessionuuid.txt"))
	if err != nil || got != "8F3C2E1A-5B7D-4C9E-A1F0-2D6B3E4C5A79" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := ParseBootSessionUUID("sysctl: unknown oid 'kern.bootsessionuuid'\n"); err == nil {
		t.Error("a sysctl error parsed as a boot ID")
	}
}

func TestParseDiskutilInfoFindsTheInternalSSD(t *testing.T) {
	root, err := ParseDiskutilInfo([]byte(capture(t, "diskutil-info-root.txt")))
	if err != nil {
		t.Fatal(err)
	}
	// The root volume's TotalSize is its container's, under 1T.
	if root.DeviceIdentifier != "disk3s1s1" || root.TotalSize != 994662584320 || root.WholeDisk {
		t.Fatalf("root: %+v", root)
	}
	if _, err := root.InternalDiskSize(); err == nil {
		t.Fatal("a volume's size was taken for the SSD's")
	}
	whole, err := root.PhysicalWholeDisk()
	if err != nil || whole != "disk0" {
		t.Fatalf("physical whole disk: %q, %v", whole, err)
	}
	disk0, err := ParseDiskutilInfo([]byte(capture(t, "diskutil-info-disk0.txt")))
	if err != nil {
		t.Fatal(err)
	}
	q, err := disk0.InternalDiskSize()
	if err != nil || q.Value() != 1000555581440 {
		t.Fatalf("disk0: %v, %v", q, err)
	}
	if q.Cmp(*mustQuantity(t, "1T")) < 0 {
		t.Fatalf("a 1 TB Mac mini's SSD %s is under the 1T floor", q)
	}
}

func TestParseDiskutilInfoRefusesAnExternalDisk(t *testing.T) {
	ext, err := ParseDiskutilInfo([]byte(capture(t, "diskutil-info-external-disk4.txt")))
	if err != nil {
		t.Fatal(err)
	}
	if q, err := ext.InternalDiskSize(); err == nil {
		t.Fatalf("an external disk reported as the internal SSD: %s", q)
	}
	if _, err := ParseDiskutilInfo([]byte("Could not find disk: /\n")); err == nil {
		t.Fatal("diskutil's error parsed")
	}
}

func TestWholeDiskOf(t *testing.T) {
	for id, want := range map[string]string{"disk0s2": "disk0", "disk0": "disk0", "disk3s1s1": "disk3", "disk12s4": "disk12"} {
		if got, err := WholeDiskOf(id); err != nil || got != want {
			t.Errorf("%s: got %q, %v", id, got, err)
		}
	}
	for _, id := range []string{"", "/dev/disk0", "disk", "nvme0n1"} {
		if _, err := WholeDiskOf(id); err == nil {
			t.Errorf("%q parsed", id)
		}
	}
}

func TestParseIfconfigMedia(t *testing.T) {
	for _, tc := range []struct {
		file    string
		subtype string
		mbps    int64
		gbps    int32
	}{
		{"ifconfig-en0-10g.txt", "10Gbase-T", 10000, 10},
		{"ifconfig-en0-1g.txt", "1000baseT", 1000, 1},
		// A 10 GbE port on a 2.5 Gb switch port: 2, under the floor.
		{"ifconfig-en0-2.5g.txt", "2500Base-T", 2500, 2},
	} {
		m, err := ParseIfconfigMedia(capture(t, tc.file))
		if err != nil || m.Subtype != tc.subtype || m.Mbps != tc.mbps || m.Gbps() != tc.gbps {
			t.Errorf("%s: got %+v (%d Gb), %v", tc.file, m, m.Gbps(), err)
		}
	}
	if m, err := ParseIfconfigMedia("\tmedia: 10Gbase-T <full-duplex>\n\tstatus: active\n"); err != nil || m.Gbps() != 10 {
		t.Errorf("manual media: got %+v, %v", m, err)
	}
	if m, err := ParseIfconfigMedia(capture(t, "ifconfig-en0-inactive.txt")); err == nil {
		t.Errorf("a link down reported as %+v", m)
	}
	if _, err := ParseIfconfigMedia("ifconfig: interface en9 does not exist\n"); err == nil {
		t.Error("ifconfig's error parsed")
	}
}

func TestParseCodesignEntitlements(t *testing.T) {
	for file, want := range map[string]bool{
		"codesign-entitlements-virtualization.stdout.txt": true,
		"codesign-entitlements-other.stdout.txt":          false,
		"codesign-entitlements-false.stdout.txt":          false,
	} {
		if got, err := ParseCodesignEntitlements([]byte(capture(t, file))); err != nil || got != want {
			t.Errorf("%s: got %v, %v; want %v", file, got, err, want)
		}
	}
	// Signed without entitlements: nothing on stdout.
	if got, err := ParseCodesignEntitlements(nil); err != nil || got {
		t.Errorf("no entitlements: got %v, %v", got, err)
	}
	if _, err := ParseCodesignEntitlements([]byte("\xfa\xde\x71\x71 not a plist")); err == nil {
		t.Error("a blob parsed")
	}
	if !CodesignUnsigned(capture(t, "codesign-unsigned.stderr.txt")) || CodesignUnsigned(capture(t, "codesign-entitlements.stderr.txt")) {
		t.Error("CodesignUnsigned misreads codesign's stderr")
	}
}
