package host

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
)

func mustQuantity(t *testing.T, s string) *resource.Quantity {
	t.Helper()
	q, err := resource.ParseQuantity(s)
	if err != nil {
		t.Fatal(err)
	}
	return &q
}

// result is one command's captured outcome.
type result struct {
	stdout, stderr string
	err            error
}

// fakeMac answers the darwin facts source's commands from captures.
type fakeMac struct {
	t       *testing.T
	answers map[string]result
	ran     []string
}

func (m *fakeMac) run(_ context.Context, name string, args ...string) ([]byte, []byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	m.ran = append(m.ran, line)
	r, ok := m.answers[line]
	if !ok {
		m.t.Errorf("unexpected command %q", line)
		return nil, []byte("no such command"), errors.New("exit status 127")
	}
	return []byte(r.stdout), []byte(r.stderr), r.err
}

var errExit1 = errors.New("exit status 1")

const (
	agentBinary  = "/usr/local/bin/macrack-agent"
	helperBinary = "/usr/local/libexec/macrack/vm-helper"
)

// healthyMac is an M4 Mac mini with a 1 TB SSD and 10 GbE, SIP on, no
// boot-args, and both binaries entitled.
func healthyMac(t *testing.T) *fakeMac {
	ents := capture(t, "codesign-entitlements-virtualization.stdout.txt")
	return &fakeMac{t: t, answers: map[string]result{
		"/usr/bin/csrutil status":                                     {stdout: capture(t, "csrutil-status-enabled.txt")},
		"/usr/sbin/sysctl -n kern.bootargs":                           {stdout: capture(t, "sysctl-kern.bootargs-unset.txt")},
		"/usr/bin/sw_vers -productVersion":                            {stdout: capture(t, "sw_vers-productVersion.txt")},
		"/usr/sbin/sysctl -n machdep.cpu.brand_string":                {stdout: capture(t, "sysctl-machdep.cpu.brand_string-m4.txt")},
		"/usr/sbin/sysctl -n hw.memsize":                              {stdout: capture(t, "sysctl-hw.memsize-16g.txt")},
		"/usr/sbin/sysctl -n kern.bootsessionuuid":                    {stdout: capture(t, "sysctl-kern.bootsessionuuid.txt")},
		"/usr/sbin/diskutil info -plist /":                            {stdout: capture(t, "diskutil-info-root.txt")},
		"/usr/sbin/diskutil info -plist disk0":                        {stdout: capture(t, "diskutil-info-disk0.txt")},
		"/sbin/ifconfig en0":                                          {stdout: capture(t, "ifconfig-en0-10g.txt")},
		"/usr/bin/codesign -d --entitlements - --xml " + agentBinary:  {stdout: ents, stderr: "Executable=" + agentBinary + "\n"},
		"/usr/bin/codesign -d --entitlements - --xml " + helperBinary: {stdout: ents, stderr: capture(t, "codesign-entitlements.stderr.txt")},
	}}
}

func (m *fakeMac) source() *darwinFacts {
	return &darwinFacts{cfg: DarwinFactsConfig{
		EntitledExecutables: []string{agentBinary, helperBinary}, AgentVersion: "v0.9.0", Log: logr.Discard(),
	}, run: m.run}
}

func TestDarwinFactsOfAHealthyMac(t *testing.T) {
	mac := healthyMac(t)
	f, err := mac.source().Facts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.SIPEnabled == nil || !*f.SIPEnabled || f.BootArgs != "" || f.MacOSVersion != "15.5" || f.Chip != "M4" ||
		f.Memory.String() != "16Gi" || f.Disk.Value() != 1000555581440 || f.NetworkGbps == nil || *f.NetworkGbps != 10 ||
		f.VirtualizationEntitlement == nil || !*f.VirtualizationEntitlement ||
		f.BootID != "8F3C2E1A-5B7D-4C9E-A1F0-2D6B3E4C5A79" || f.AgentVersion != "v0.9.0" {
		t.Fatalf("facts: %+v", f)
	}
	if f.Quota != nil || f.Inventory != nil || f.Images != nil {
		t.Fatalf("the facts source reports what other writers own: %+v", f)
	}
	for _, cmd := range mac.ran {
		if strings.Contains(cmd, "nvram") {
			t.Errorf("nvram ran although kern.bootargs answered: %q", cmd)
		}
	}
}

func TestDarwinFactsReportACustomSIPAsNotEnabled(t *testing.T) {
	mac := healthyMac(t)
	mac.answers["/usr/bin/csrutil status"] = result{stdout: capture(t, "csrutil-status-custom.txt")}
	f, err := mac.source().Facts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.SIPEnabled == nil || *f.SIPEnabled {
		t.Fatalf("a custom SIP configuration reported as %v", f.SIPEnabled)
	}
}

func TestDarwinFactsLeaveAFailedFactUnknown(t *testing.T) {
	mac := healthyMac(t)
	mac.answers["/usr/bin/csrutil status"] = result{stderr: "csrutil: command not found\n", err: errExit1}
	mac.answers["/sbin/ifconfig en0"] = result{stdout: capture(t, "ifconfig-en0-inactive.txt")}
	mac.answers["/usr/bin/codesign -d --entitlements - --xml "+helperBinary] = result{stderr: "codesign: timed out\n", err: errExit1}
	f, err := mac.source().Facts(context.Background())
	if err == nil {
		t.Fatal("no error for the facts that failed")
	}
	for _, fact := range []string{"sipEnabled", "networkGbps", "virtualizationEntitlement"} {
		if !strings.Contains(err.Error(), fact+" unknown") {
			t.Errorf("the error does not name %s: %v", fact, err)
		}
	}
	if f.SIPEnabled != nil || f.NetworkGbps != nil || f.VirtualizationEntitlement != nil {
		t.Fatalf("failed facts guessed: sip %v, nic %v, entitlement %v", f.SIPEnabled, f.NetworkGbps, f.VirtualizationEntitlement)
	}
	// The facts that were read are returned all the same.
	if f.Chip != "M4" || f.Disk == nil || f.BootID == "" {
		t.Fatalf("facts read were dropped: %+v", f)
	}
}

func TestDarwinFactsReadNVRAMWhenSysctlFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		nv   result
		want string
	}{
		{"set", result{stdout: capture(t, "nvram-boot-args-set.stdout.txt")}, "-v keepsyms=1"},
		{"unset", result{stderr: capture(t, "nvram-boot-args-unset.stderr.txt"), err: errExit1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mac := healthyMac(t)
			mac.answers["/usr/sbin/sysctl -n kern.bootargs"] = result{stderr: "sysctl: unknown oid 'kern.bootargs'\n", err: errExit1}
			mac.answers["/usr/sbin/nvram boot-args"] = tc.nv
			f, err := mac.source().Facts(context.Background())
			if err != nil || f.BootArgs != tc.want {
				t.Fatalf("boot-args %q, %v; want %q", f.BootArgs, err, tc.want)
			}
		})
	}
	mac := healthyMac(t)
	mac.answers["/usr/sbin/sysctl -n kern.bootargs"] = result{err: errExit1}
	mac.answers["/usr/sbin/nvram boot-args"] = result{stderr: "nvram: Error getting variable - 'boot-args': (iokit/common) not permitted\n", err: errExit1}
	if _, err := mac.source().Facts(context.Background()); err == nil || !strings.Contains(err.Error(), "bootArgs unknown") {
		t.Fatalf("both reads failed, got %v", err)
	}
}

func TestDarwinFactsEntitlementNeedsEveryBinary(t *testing.T) {
	mac := healthyMac(t)
	mac.answers["/usr/bin/codesign -d --entitlements - --xml "+helperBinary] = result{
		stderr: capture(t, "codesign-unsigned.stderr.txt"), err: errExit1}
	f, err := mac.source().Facts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.VirtualizationEntitlement == nil || *f.VirtualizationEntitlement {
		t.Fatalf("an unsigned vm-helper reported entitled: %v", f.VirtualizationEntitlement)
	}
}

func TestDarwinFactsOfAMacBootedFromAnExternalDisk(t *testing.T) {
	mac := healthyMac(t)
	root := strings.Replace(capture(t, "diskutil-info-root.txt"), "<string>disk0s2</string>", "<string>disk4s2</string>", 1)
	mac.answers["/usr/sbin/diskutil info -plist /"] = result{stdout: root}
	mac.answers["/usr/sbin/diskutil info -plist disk4"] = result{stdout: capture(t, "diskutil-info-external-disk4.txt")}
	f, err := mac.source().Facts(context.Background())
	if err == nil || f.Disk != nil {
		t.Fatalf("an external disk reported as the SSD: %v, %v", f.Disk, err)
	}
}
