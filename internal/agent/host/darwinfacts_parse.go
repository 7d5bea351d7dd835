package host

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"howett.net/plist"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The parsers of the commands the darwin facts source runs. They are plain
// Go, without a build tag, so that they are tested on Linux from captured
// outputs (testdata/darwin). Each reads only: none of the commands they
// parse changes the host.

// VirtualizationEntitlement is the entitlement Virtualization.framework
// requires of a process that creates VMs.
const VirtualizationEntitlement = "com.apple.security.virtualization"

// maxBootArgs is the API's bound on reported boot-args, and the kernel's
// own on the boot command line.
const maxBootArgs = 1024

// SIPStatus is what `csrutil status` says of System Integrity Protection.
type SIPStatus struct {
	// State is the status line's word, without the final period:
	// "enabled", "disabled", "unknown (Custom Configuration)", or
	// "enabled (Custom Configuration)".
	State string
	// Enabled is true only for a plain "enabled": a custom configuration,
	// even one that calls itself enabled, is not.
	Enabled bool
	// Custom is a custom configuration: some protections on, some off.
	Custom bool
	// Disabled lists the protections a custom configuration reports off.
	Disabled []string
}

// Reason says why SIP does not count as enabled; empty when it does.
func (s SIPStatus) Reason() string {
	if s.Enabled {
		return ""
	}
	msg := fmt.Sprintf("System Integrity Protection status is %q, not a plain enabled", s.State)
	if len(s.Disabled) > 0 {
		msg += "; disabled: " + strings.Join(s.Disabled, ", ")
	}
	return msg
}

const sipStatusPrefix = "System Integrity Protection status:"

// ParseCSRUtilStatus parses the output of `csrutil status`. Anything but a
// plain "enabled." is reported as not enabled; an output without the status
// line is an error, so that the fact stays unknown.
func ParseCSRUtilStatus(out string) (SIPStatus, error) {
	var st SIPStatus
	found, inConfig := false, false
	for _, line := range strings.Split(out, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, sipStatusPrefix):
			if found {
				return SIPStatus{}, errors.New("csrutil status: two status lines")
			}
			found = true
			st.State = strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(trimmed, sipStatusPrefix)), ".")
		case trimmed == "Configuration:":
			inConfig = true
		case inConfig && trimmed == "":
			inConfig = false
		case inConfig:
			name, value, ok := strings.Cut(trimmed, ":")
			if ok && strings.TrimSpace(value) != "enabled" {
				st.Disabled = append(st.Disabled, strings.TrimSpace(name))
			}
		}
	}
	if !found || st.State == "" {
		return SIPStatus{}, fmt.Errorf("csrutil status: no %q line in %q", sipStatusPrefix, truncate(out))
	}
	st.Custom = strings.Contains(st.State, "Custom Configuration")
	st.Enabled = st.State == "enabled"
	return st, nil
}

// ParseSysctlBootArgs parses `sysctl -n kern.bootargs`: the boot-args the
// running kernel booted with, verbatim; empty when there are none.
func ParseSysctlBootArgs(out string) (string, error) {
	v := strings.TrimRight(out, "\r\n")
	if strings.ContainsAny(v, "\r\n") {
		return "", fmt.Errorf("kern.bootargs: more than one line in %q", truncate(out))
	}
	return checkBootArgs(strings.TrimSpace(v))
}

// nvramNotFound is what `nvram boot-args` says on stderr, exiting 1, when
// the variable is not set.
var nvramNotFound = regexp.MustCompile(`Error getting variable - 'boot-args': .*data was not found`)

// ParseNVRAMBootArgs parses the read `nvram boot-args`: on stdout
// "boot-args\t<value>", with nvram's %xx escapes; or, when the variable is
// not set, the "data was not found" error on stderr, which means no
// boot-args. Anything else is an error.
func ParseNVRAMBootArgs(stdout, stderr string) (string, error) {
	for _, line := range strings.Split(stdout, "\n") {
		name, value, ok := strings.Cut(strings.TrimRight(line, "\r"), "\t")
		if !ok || name != "boot-args" {
			continue
		}
		decoded, err := url.PathUnescape(value)
		if err != nil {
			return "", fmt.Errorf("nvram boot-args: %w", err)
		}
		return checkBootArgs(strings.TrimSpace(decoded))
	}
	if nvramNotFound.MatchString(stderr) {
		return "", nil
	}
	return "", fmt.Errorf("nvram boot-args: no value in %q (stderr %q)", truncate(stdout), truncate(stderr))
}

func checkBootArgs(v string) (string, error) {
	if len(v) > maxBootArgs {
		return "", fmt.Errorf("boot-args are %d bytes, more than %d", len(v), maxBootArgs)
	}
	return v, nil
}

var macOSVersion = regexp.MustCompile(`^[0-9]+(\.[0-9]+){0,2}$`)

// ParseSwVersProductVersion parses `sw_vers -productVersion`, e.g. "15.5".
func ParseSwVersProductVersion(out string) (string, error) {
	v := strings.TrimSpace(out)
	if !macOSVersion.MatchString(v) {
		return "", fmt.Errorf("sw_vers: %q is not a macOS version", truncate(out))
	}
	return v, nil
}

// ParseChip parses `sysctl -n machdep.cpu.brand_string`: "Apple M4" is the
// chip "M4", "Apple M4 Pro" is "M4 Pro", as a MacNodeClass names them.
// Another brand is reported as it is, and matches no class.
func ParseChip(out string) (string, error) {
	v := strings.Join(strings.Fields(out), " ")
	if v == "" {
		return "", errors.New("machdep.cpu.brand_string is empty")
	}
	if chip, ok := strings.CutPrefix(v, "Apple "); ok {
		return chip, nil
	}
	return v, nil
}

// ParseMemSize parses `sysctl -n hw.memsize`, bytes, as a binary quantity.
func ParseMemSize(out string) (*resource.Quantity, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("hw.memsize: %q is not a positive byte count", truncate(out))
	}
	return resource.NewQuantity(n, resource.BinarySI), nil
}

var bootSessionUUID = regexp.MustCompile(`^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$`)

// ParseBootSessionUUID parses `sysctl -n kern.bootsessionuuid`: a UUID that
// changes with each boot, the chassis' boot ID.
func ParseBootSessionUUID(out string) (string, error) {
	v := strings.TrimSpace(out)
	if !bootSessionUUID.MatchString(v) {
		return "", fmt.Errorf("kern.bootsessionuuid: %q is not a UUID", truncate(out))
	}
	return v, nil
}

// DiskutilInfo is the part of `diskutil info -plist <disk>` the facts use.
type DiskutilInfo struct {
	DeviceIdentifier string `plist:"DeviceIdentifier"`
	ParentWholeDisk  string `plist:"ParentWholeDisk"`
	WholeDisk        bool   `plist:"WholeDisk"`
	Internal         bool   `plist:"Internal"`
	// TotalSize is bytes. For an APFS volume it is its container's size,
	// less than the SSD's: the physical store's whole disk has the SSD's.
	TotalSize int64 `plist:"TotalSize"`
	// APFSPhysicalStores are the partitions an APFS volume's container
	// lives on, e.g. disk0s2.
	APFSPhysicalStores []struct {
		APFSPhysicalStore string `plist:"APFSPhysicalStore"`
	} `plist:"APFSPhysicalStores"`
}

// ParseDiskutilInfo parses the output of `diskutil info -plist <disk>`.
func ParseDiskutilInfo(out []byte) (DiskutilInfo, error) {
	var info DiskutilInfo
	if _, err := plist.Unmarshal(out, &info); err != nil {
		return DiskutilInfo{}, fmt.Errorf("diskutil info: %w", err)
	}
	if info.DeviceIdentifier == "" {
		return DiskutilInfo{}, errors.New("diskutil info: no DeviceIdentifier")
	}
	return info, nil
}

// PhysicalWholeDisk is the whole disk a volume lives on: for an APFS
// volume, the whole disk of its container's one physical store (disk0 for
// disk0s2); otherwise its parent whole disk.
func (d DiskutilInfo) PhysicalWholeDisk() (string, error) {
	switch len(d.APFSPhysicalStores) {
	case 0:
		if d.ParentWholeDisk == "" {
			return "", fmt.Errorf("diskutil info: %s has no parent whole disk", d.DeviceIdentifier)
		}
		return d.ParentWholeDisk, nil
	case 1:
		return WholeDiskOf(d.APFSPhysicalStores[0].APFSPhysicalStore)
	default:
		return "", fmt.Errorf("diskutil info: %s's container spans %d physical stores", d.DeviceIdentifier, len(d.APFSPhysicalStores))
	}
}

var diskSlice = regexp.MustCompile(`^(disk[0-9]+)(s[0-9]+)*$`)

// WholeDiskOf is the whole disk of a BSD device identifier: disk0 for
// disk0s2 or disk0.
func WholeDiskOf(id string) (string, error) {
	m := diskSlice.FindStringSubmatch(id)
	if m == nil {
		return "", fmt.Errorf("%q is not a disk identifier", id)
	}
	return m[1], nil
}

// InternalDiskSize is the size of the internal SSD from `diskutil info
// -plist` of its whole disk: an error unless the disk is a whole, internal
// one of a positive size.
func (d DiskutilInfo) InternalDiskSize() (*resource.Quantity, error) {
	switch {
	case !d.WholeDisk:
		return nil, fmt.Errorf("diskutil info: %s is not a whole disk", d.DeviceIdentifier)
	case !d.Internal:
		return nil, fmt.Errorf("diskutil info: %s is not internal: the host booted from an external disk", d.DeviceIdentifier)
	case d.TotalSize <= 0:
		return nil, fmt.Errorf("diskutil info: %s has no size", d.DeviceIdentifier)
	}
	return resource.NewQuantity(d.TotalSize, resource.DecimalSI), nil
}

// Media is an interface's negotiated link, from ifconfig's media line.
type Media struct {
	// Subtype is the media's name, e.g. "10Gbase-T", "1000baseT".
	Subtype string
	// Mbps is the link speed.
	Mbps int64
}

// Gbps is the speed in whole Gb/s, rounded down: a 2.5 Gb link is 2.
func (m Media) Gbps() int32 { return int32(m.Mbps / 1000) }

var (
	mediaSpeed = regexp.MustCompile(`^([0-9]+)(g?)base`)
	// "media: autoselect (10Gbase-T <full-duplex>)" or, set by hand,
	// "media: 10Gbase-T <full-duplex>".
	mediaActive = regexp.MustCompile(`\(([^ <)]+)`)
)

// ParseIfconfigMedia parses `ifconfig <nic>`: the negotiated media of its
// "media:" line, which must say an active link. 10Gbase-T is 10 Gb/s,
// 2500Base-T 2.5, 1000baseT 1.
func ParseIfconfigMedia(out string) (Media, error) {
	var media, status string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "media:"); ok {
			media = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "status:"); ok {
			status = strings.TrimSpace(v)
		}
	}
	if media == "" {
		return Media{}, fmt.Errorf("ifconfig: no media line in %q", truncate(out))
	}
	if status != "active" {
		return Media{}, fmt.Errorf("ifconfig: the link is %q, not active (media %q)", status, media)
	}
	subtype := strings.Fields(media)[0]
	if m := mediaActive.FindStringSubmatch(media); m != nil {
		subtype = m[1]
	}
	m := mediaSpeed.FindStringSubmatch(strings.ToLower(subtype))
	if m == nil {
		return Media{}, fmt.Errorf("ifconfig: no speed in media %q", media)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return Media{}, fmt.Errorf("ifconfig: media %q: %w", media, err)
	}
	if m[2] != "" {
		n *= 1000
	}
	return Media{Subtype: subtype, Mbps: n}, nil
}

// ParseCodesignEntitlements parses the stdout of `codesign -d
// --entitlements - --xml <binary>`: whether the signature grants
// com.apple.security.virtualization. A signature without entitlements
// prints nothing, and grants none.
func ParseCodesignEntitlements(stdout []byte) (bool, error) {
	if strings.TrimSpace(string(stdout)) == "" {
		return false, nil
	}
	var ents map[string]any
	if _, err := plist.Unmarshal(stdout, &ents); err != nil {
		return false, fmt.Errorf("codesign entitlements: %w", err)
	}
	v, ok := ents[VirtualizationEntitlement].(bool)
	return ok && v, nil
}

// CodesignUnsigned is whether codesign's stderr says the binary is not
// signed at all: it then has no entitlements, which is a fact, not a
// failure to read one.
func CodesignUnsigned(stderr string) bool {
	return strings.Contains(stderr, "code object is not signed at all")
}

func truncate(s string) string {
	const max = 256
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
