package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	"howett.net/plist"
	"k8s.io/utils/clock"
)

// Reporter builds the Report the guest answers a ReportRequest with.
type Reporter interface {
	Report(ctx context.Context) (Report, error)
}

// maxInfoPlistSize bounds how much of an Info.plist is read; Xcode's is a
// few KiB, and a huge file there is not an Xcode.
const maxInfoPlistSize = 1 << 20

// SystemReporterOptions configure a SystemReporter.
type SystemReporterOptions struct {
	// XcodeRoot is the volume root holding Applications/Xcode*.app; "/" in
	// the guest, a temp dir in tests. Empty means "/".
	XcodeRoot string
	// DiskPath is any path on the volume whose headroom is reported.
	// Empty means "/".
	DiskPath string
	// MinHeadroomBytes is the least headroom a guest ready for work has.
	MinHeadroomBytes int64
}

// SystemReporter reports the machine it runs on: the guest agent's boot
// stage, the Xcodes installed under a root, and the free space of a volume.
// It is portable to any unix with statfs, so it runs in Linux tests.
type SystemReporter struct {
	opts  SystemReporterOptions
	boot  *BootState
	clock clock.PassiveClock
	log   logr.Logger
}

// NewSystemReporter returns a SystemReporter reading boot's stage and
// stamping reports with clk.
func NewSystemReporter(opts SystemReporterOptions, boot *BootState, clk clock.PassiveClock, log logr.Logger) *SystemReporter {
	if opts.XcodeRoot == "" {
		opts.XcodeRoot = "/"
	}
	if opts.DiskPath == "" {
		opts.DiskPath = "/"
	}
	return &SystemReporter{opts: opts, boot: boot, clock: clk, log: log}
}

// Report implements Reporter. It fails only if the disk cannot be
// measured; an Xcode whose Info.plist cannot be read is left out.
func (s *SystemReporter) Report(ctx context.Context) (Report, error) {
	headroom, err := DiskHeadroom(s.opts.DiskPath)
	if err != nil {
		return Report{}, err
	}
	xcodes := s.XcodeVersions()
	stage := s.boot.Stage()
	return Report{
		BootStage:         string(stage),
		XcodeVersions:     xcodes,
		DiskHeadroomBytes: headroom,
		ReadyForWork:      stage == BootStageReady && headroom >= s.opts.MinHeadroomBytes && len(xcodes) > 0,
		Time:              s.clock.Now().UTC(),
	}, nil
}

// SelfCheck is the start-up check that moves the agent to BootStageReady:
// the disk path can be measured and the Xcode root can be listed (an
// absent Applications folder is fine: there is just no Xcode).
func (s *SystemReporter) SelfCheck() error {
	if _, err := DiskHeadroom(s.opts.DiskPath); err != nil {
		return err
	}
	apps := filepath.Join(s.opts.XcodeRoot, "Applications")
	if _, err := os.ReadDir(apps); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("listing %s: %w", apps, err)
	}
	return nil
}

// XcodeVersions reads CFBundleShortVersionString from every
// <root>/Applications/Xcode*.app/Contents/Info.plist, XML or binary, and
// returns them sorted by version, without duplicates. An unreadable one is
// skipped with a warning: one broken Xcode must not hide the others.
func (s *SystemReporter) XcodeVersions() []string {
	apps := filepath.Join(s.opts.XcodeRoot, "Applications")
	entries, err := os.ReadDir(apps)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Info("Listing applications failed; reporting no Xcode", "path", apps, "reason", err.Error())
		}
		return []string{}
	}
	versions := []string{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "Xcode") || !strings.HasSuffix(name, ".app") {
			continue
		}
		path := filepath.Join(apps, name, "Contents", "Info.plist")
		v, err := bundleVersion(path)
		if err != nil {
			s.log.Info("Skipping an unreadable Xcode", "path", path, "reason", err.Error())
			continue
		}
		versions = append(versions, v)
	}
	slices.SortFunc(versions, compareVersions)
	return slices.Compact(versions)
}

// bundleVersion reads an Info.plist's CFBundleShortVersionString.
func bundleVersion(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxInfoPlistSize+1))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxInfoPlistSize {
		return "", fmt.Errorf("%s is over %d bytes", path, maxInfoPlistSize)
	}
	var info struct {
		Version string `plist:"CFBundleShortVersionString"`
	}
	if _, err := plist.Unmarshal(data, &info); err != nil {
		return "", fmt.Errorf("decoding %s: %w", path, err)
	}
	if v := strings.TrimSpace(info.Version); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("%s has no CFBundleShortVersionString", path)
}

// compareVersions orders dotted versions numerically ("16.2" < "16.10"),
// falling back to text for parts that are not numbers ("26.0 beta").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		an, aerr := strconv.ParseUint(as[i], 10, 64)
		bn, berr := strconv.ParseUint(bs[i], 10, 64)
		var c int
		if aerr == nil && berr == nil {
			c = cmpUint(an, bn)
		} else {
			c = strings.Compare(as[i], bs[i])
		}
		if c != 0 {
			return c
		}
	}
	if c := len(as) - len(bs); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// DiskHeadroom is the space left to unprivileged writers on the volume
// holding path: what a build job can actually use.
func DiskHeadroom(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	// Bsize is int64 on Linux and uint32 on darwin.
	bsize := uint64(st.Bsize)
	if bsize != 0 && st.Bavail > math.MaxInt64/bsize {
		return math.MaxInt64, nil
	}
	return int64(st.Bavail * bsize), nil
}
