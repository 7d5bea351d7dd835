//go:build darwin

package host

// The agent-unit tier, on a Mac (.github/workflows/macos.yml): the darwin
// facts read from the real host by the commands the agent runs, each
// checked against the kernel's own answer through sysctl(3). On Linux
// hack/darwincheck type-checks this file.

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// MACRACK_TEST_ENTITLED=1 says the test binary was signed with the
// virtualization entitlement, as the workflow signs it.
const entitledEnv = "MACRACK_TEST_ENTITLED"

func TestTheFactsOfThisMac(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewDarwinFacts(DarwinFactsConfig{EntitledExecutables: []string{self}, AgentVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := src.Facts(ctx)
	if f == nil {
		t.Fatalf("no facts: %v", err)
	}
	// A hosted runner is a VM: its disk is not an internal SSD and its NIC
	// has no negotiated speed. Those two may be unknown; a Mac mini knows
	// them. Every other fact is read on any Mac.
	if err != nil {
		for _, fact := range []string{"sipEnabled", "bootArgs", "macOSVersion", "chip", "memory", "bootID", "virtualizationEntitlement"} {
			if strings.Contains(err.Error(), fact+" unknown") {
				t.Errorf("%s is unknown: %v", fact, err)
			}
		}
		t.Logf("facts this host does not have: %v", err)
	}
	t.Logf("facts: macOS %s, chip %q, memory %v, disk %v, NIC %v Gb/s, SIP %v, boot-args %q, entitled %v, boot %s",
		f.MacOSVersion, f.Chip, f.Memory, f.Disk, deref(f.NetworkGbps), deref(f.SIPEnabled), f.BootArgs,
		deref(f.VirtualizationEntitlement), f.BootID)

	if want, err := unix.Sysctl("kern.osproductversion"); err != nil || f.MacOSVersion != want {
		t.Errorf("macOSVersion %q, the kernel says %q (%v)", f.MacOSVersion, want, err)
	}
	if brand, err := unix.Sysctl("machdep.cpu.brand_string"); err != nil || "Apple "+f.Chip != strings.TrimSpace(brand) {
		t.Errorf("chip %q, the kernel's brand %q (%v)", f.Chip, brand, err)
	}
	if want, err := unix.SysctlUint64("hw.memsize"); err != nil || f.Memory == nil || f.Memory.Value() != int64(want) {
		t.Errorf("memory %v, the kernel says %d bytes (%v)", f.Memory, want, err)
	}
	if want, err := unix.Sysctl("kern.bootsessionuuid"); err != nil || f.BootID != want {
		t.Errorf("bootID %q, the kernel says %q (%v)", f.BootID, want, err)
	}
	if want, err := unix.Sysctl("kern.bootargs"); err == nil && f.BootArgs != strings.TrimSpace(want) {
		t.Errorf("bootArgs %q, the kernel says %q", f.BootArgs, want)
	}
	if f.SIPEnabled == nil {
		t.Error("sipEnabled not reported")
	}
	if f.VirtualizationEntitlement == nil {
		t.Fatal("virtualizationEntitlement not reported")
	}
	if os.Getenv(entitledEnv) == "1" && !*f.VirtualizationEntitlement {
		t.Errorf("%s=1, but this test binary's signature does not carry %s", entitledEnv, VirtualizationEntitlement)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return "unknown"
	}
	return *p
}
