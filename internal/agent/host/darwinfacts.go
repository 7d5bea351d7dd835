package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// DarwinFactsConfig configures the facts source of a Mac (NewDarwinFacts).
type DarwinFactsConfig struct {
	// Interface is the NIC whose negotiated speed is reported; en0, the
	// Mac mini's built-in Ethernet, if empty.
	Interface string
	// EntitledExecutables are the binaries whose signatures must all carry
	// com.apple.security.virtualization for the entitlement to be
	// reported: the agent's own, and the vm-helper that runs the VMs.
	// Empty: the agent's own executable alone.
	EntitledExecutables []string
	// AgentVersion is reported as it is.
	AgentVersion string
	// Timeout bounds each command; 10s if zero.
	Timeout time.Duration
	// Log says why SIP does not count as enabled, and which binary lacks
	// the entitlement.
	Log logr.Logger
}

// The commands the darwin facts source runs, by absolute path so that no
// PATH entry stands in for them. Every one of them only reads.
const (
	sysctlPath   = "/usr/sbin/sysctl"
	csrutilPath  = "/usr/bin/csrutil"
	nvramPath    = "/usr/sbin/nvram"
	swVersPath   = "/usr/bin/sw_vers"
	diskutilPath = "/usr/sbin/diskutil"
	ifconfigPath = "/sbin/ifconfig"
	codesignPath = "/usr/bin/codesign"
)

// commandRunner runs one command and returns its stdout and stderr; err is
// non-nil when it did not run or exited non-zero.
type commandRunner func(ctx context.Context, name string, args ...string) (stdout, stderr []byte, err error)

// darwinFacts reads the chassis' facts from macOS through run: the exec
// adapter on a Mac (darwinfacts_darwin.go), captured outputs in tests.
type darwinFacts struct {
	cfg DarwinFactsConfig
	run commandRunner
}

var _ FactsSource = (*darwinFacts)(nil)

// Facts implements FactsSource. A fact whose command fails, or whose output
// does not parse, is left unknown (nil, or empty) and its error joined into
// the one returned with the facts that were read: nothing is guessed, and
// an unknown SIP or entitlement keeps the chassis out of service.
func (d *darwinFacts) Facts(ctx context.Context) (*fleetv1alpha1.ReportedFacts, error) {
	f := &fleetv1alpha1.ReportedFacts{AgentVersion: d.cfg.AgentVersion}
	var errs []error
	fail := func(fact string, err error) { errs = append(errs, fmt.Errorf("%s unknown: %w", fact, err)) }

	if out, err := d.output(ctx, csrutilPath, "status"); err != nil {
		fail("sipEnabled", err)
	} else if st, err := ParseCSRUtilStatus(out); err != nil {
		fail("sipEnabled", err)
	} else {
		f.SIPEnabled = &st.Enabled
		if !st.Enabled {
			d.cfg.Log.Info("SIP does not count as enabled; the chassis stays out of service", "reason", st.Reason())
		}
	}

	if args, err := d.bootArgs(ctx); err != nil {
		fail("bootArgs", err)
	} else {
		f.BootArgs = args
	}

	if out, err := d.output(ctx, swVersPath, "-productVersion"); err != nil {
		fail("macOSVersion", err)
	} else if v, err := ParseSwVersProductVersion(out); err != nil {
		fail("macOSVersion", err)
	} else {
		f.MacOSVersion = v
	}

	if out, err := d.output(ctx, sysctlPath, "-n", "machdep.cpu.brand_string"); err != nil {
		fail("chip", err)
	} else if v, err := ParseChip(out); err != nil {
		fail("chip", err)
	} else {
		f.Chip = v
	}

	if out, err := d.output(ctx, sysctlPath, "-n", "hw.memsize"); err != nil {
		fail("memory", err)
	} else if q, err := ParseMemSize(out); err != nil {
		fail("memory", err)
	} else {
		f.Memory = q
	}

	if out, err := d.output(ctx, sysctlPath, "-n", "kern.bootsessionuuid"); err != nil {
		fail("bootID", err)
	} else if v, err := ParseBootSessionUUID(out); err != nil {
		fail("bootID", err)
	} else {
		f.BootID = v
	}

	if err := d.disk(ctx, f); err != nil {
		fail("disk", err)
	}

	nic := d.cfg.Interface
	if nic == "" {
		nic = "en0"
	}
	if out, err := d.output(ctx, ifconfigPath, nic); err != nil {
		fail("networkGbps", err)
	} else if m, err := ParseIfconfigMedia(out); err != nil {
		fail("networkGbps", fmt.Errorf("%s: %w", nic, err))
	} else {
		g := m.Gbps()
		f.NetworkGbps = &g
	}

	if ok, err := d.entitled(ctx); err != nil {
		fail("virtualizationEntitlement", err)
	} else {
		f.VirtualizationEntitlement = &ok
	}
	return f, errors.Join(errs...)
}

// bootArgs are the boot-args the running kernel booted with
// (kern.bootargs), or failing that the NVRAM variable, read.
func (d *darwinFacts) bootArgs(ctx context.Context) (string, error) {
	out, sysctlErr := d.output(ctx, sysctlPath, "-n", "kern.bootargs")
	if sysctlErr == nil {
		v, err := ParseSysctlBootArgs(out)
		if err == nil {
			return v, nil
		}
		sysctlErr = err
	}
	stdout, stderr, runErr := d.run(ctx, nvramPath, "boot-args")
	v, err := ParseNVRAMBootArgs(string(stdout), string(stderr))
	if err != nil {
		return "", errors.Join(sysctlErr, err, runErr)
	}
	return v, nil
}

// disk sets f.Disk to the internal SSD's size: the whole disk under the
// root volume's APFS container. The volume's own TotalSize is the
// container's, some 6 GB short of the SSD (994.7 GB on a 1 TB Mac mini),
// which would put every 1 TB chassis under the 1T floor.
func (d *darwinFacts) disk(ctx context.Context, f *fleetv1alpha1.ReportedFacts) error {
	out, err := d.output(ctx, diskutilPath, "info", "-plist", "/")
	if err != nil {
		return err
	}
	root, err := ParseDiskutilInfo([]byte(out))
	if err != nil {
		return err
	}
	whole, err := root.PhysicalWholeDisk()
	if err != nil {
		return err
	}
	if out, err = d.output(ctx, diskutilPath, "info", "-plist", whole); err != nil {
		return err
	}
	info, err := ParseDiskutilInfo([]byte(out))
	if err != nil {
		return err
	}
	q, err := info.InternalDiskSize()
	if err != nil {
		return err
	}
	f.Disk = q
	return nil
}

// entitled is whether every configured executable's signature grants the
// virtualization entitlement.
func (d *darwinFacts) entitled(ctx context.Context) (bool, error) {
	if len(d.cfg.EntitledExecutables) == 0 {
		return false, errors.New("no executable to check")
	}
	all := true
	var errs []error
	for _, path := range d.cfg.EntitledExecutables {
		stdout, stderr, err := d.run(ctx, codesignPath, "-d", "--entitlements", "-", "--xml", path)
		var ok bool
		switch {
		case err != nil && CodesignUnsigned(string(stderr)):
			ok = false
		case err != nil:
			errs = append(errs, fmt.Errorf("codesign %s: %w: %s", path, err, bytes.TrimSpace(stderr)))
			continue
		default:
			if ok, err = ParseCodesignEntitlements(stdout); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
				continue
			}
		}
		if !ok {
			d.cfg.Log.Info("A binary's signature lacks the virtualization entitlement; the chassis stays out of service",
				"binary", path, "entitlement", VirtualizationEntitlement)
			all = false
		}
	}
	if len(errs) > 0 {
		return false, errors.Join(errs...)
	}
	return all, nil
}

// output runs a command and returns its stdout; a failure carries stderr.
func (d *darwinFacts) output(ctx context.Context, name string, args ...string) (string, error) {
	stdout, stderr, err := d.run(ctx, name, args...)
	if err != nil {
		cmd := strings.Join(append([]string{name}, args...), " ")
		if msg := bytes.TrimSpace(stderr); len(msg) > 0 {
			return "", fmt.Errorf("%s: %w: %s", cmd, err, truncate(string(msg)))
		}
		return "", fmt.Errorf("%s: %w", cmd, err)
	}
	return string(stdout), nil
}
