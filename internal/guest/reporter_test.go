package guest

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"howett.net/plist"
	clocktesting "k8s.io/utils/clock/testing"
)

// xmlInfoPlist is an Info.plist as Xcode ships it, cut down.
func xmlInfoPlist(version string) []byte {
	return []byte(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>CFBundleIdentifier</key>
	<string>com.apple.dt.Xcode</string>
	<key>CFBundleShortVersionString</key>
	<string>` + version + `</string>
	<key>CFBundleVersion</key>
	<integer>23507</integer>
</dict>
</plist>
`)
}

// binaryInfoPlist encodes the same in Apple's binary plist format.
func binaryInfoPlist(t *testing.T, version string) []byte {
	t.Helper()
	b, err := plist.Marshal(map[string]any{
		"CFBundleIdentifier":         "com.apple.dt.Xcode",
		"CFBundleShortVersionString": version,
		"CFBundleVersion":            int64(24000),
	}, plist.BinaryFormat)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "bplist00") {
		t.Fatalf("the encoder did not write a binary plist: %q", b[:8])
	}
	return b
}

// writeApp writes root/Applications/<app>/Contents/Info.plist.
func writeApp(t *testing.T, root, app string, info []byte) string {
	t.Helper()
	dir := filepath.Join(root, "Applications", app, "Contents")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "Info.plist")
	if err := os.WriteFile(path, info, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func newTestReporter(root string, minHeadroom int64, stage BootStage, logs *logBuffer) (*SystemReporter, *clocktesting.FakeClock) {
	boot := NewBootState()
	if stage != BootStageBooting {
		_ = boot.Advance(stage)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 6, 2, 13, 0, 0, 0, time.UTC))
	return NewSystemReporter(SystemReporterOptions{XcodeRoot: root, DiskPath: root, MinHeadroomBytes: minHeadroom}, boot, clk, logs.logger()), clk
}

func TestXcodeVersionsReadsXMLAndBinaryPlistsAndSkipsBrokenOnes(t *testing.T) {
	root := t.TempDir()
	writeApp(t, root, "Xcode.app", xmlInfoPlist("16.2"))
	writeApp(t, root, "Xcode_16.2.app", xmlInfoPlist("16.2"))
	writeApp(t, root, "Xcode-16.10.app", xmlInfoPlist("16.10"))
	writeApp(t, root, "Xcode-beta.app", binaryInfoPlist(t, "26.0"))
	writeApp(t, root, "Xcode-15.4.app", binaryInfoPlist(t, "15.4"))
	garbage := writeApp(t, root, "Xcode-garbage.app", []byte("\x00\x01 this is not a plist <dict>"))
	noVersion := writeApp(t, root, "Xcode-noversion.app", []byte(`<plist version="1.0"><dict><key>CFBundleVersion</key><string>1</string></dict></plist>`))
	writeApp(t, root, "Safari.app", xmlInfoPlist("18.0"))
	// An Info.plist that is a directory cannot be read, even by root.
	unreadable := filepath.Join(root, "Applications", "Xcode-unreadable.app", "Contents", "Info.plist")
	if err := os.MkdirAll(unreadable, 0o755); err != nil {
		t.Fatal(err)
	}

	logs := &logBuffer{}
	r, _ := newTestReporter(root, 0, BootStageReady, logs)
	got := r.XcodeVersions()
	want := []string{"15.4", "16.2", "16.10", "26.0"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q: sorted by version, without duplicates or Safari", got, want)
	}
	for _, skipped := range []string{garbage, noVersion, unreadable} {
		if !strings.Contains(logs.String(), skipped) {
			t.Fatalf("skipping %s was not logged; logs:\n%s", skipped, logs.String())
		}
	}
}

func TestReportSaysReadyForWorkOnlyWhenEveryConditionHolds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		withXcode   bool
		minHeadroom int64
		stage       BootStage
		ready       bool
	}{
		{"a booted guest with an Xcode and room is ready", true, 1, BootStageReady, true},
		{"a guest with no Xcode is not ready", false, 1, BootStageReady, false},
		{"a guest below its headroom minimum is not ready", true, math.MaxInt64, BootStageReady, false},
		{"a guest whose agent has only started is not ready", true, 1, BootStageAgentStarted, false},
		{"a guest still booting is not ready", true, 1, BootStageBooting, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.withXcode {
				writeApp(t, root, "Xcode.app", xmlInfoPlist("16.2"))
			}
			r, clk := newTestReporter(root, tc.minHeadroom, tc.stage, &logBuffer{})
			got, err := r.Report(context.Background())
			if err != nil {
				t.Fatalf("Report: %v", err)
			}
			if got.ReadyForWork != tc.ready {
				t.Fatalf("ReadyForWork is %t, want %t: %+v", got.ReadyForWork, tc.ready, got)
			}
			if got.BootStage != string(tc.stage) || !got.Time.Equal(clk.Now()) || got.DiskHeadroomBytes <= 0 {
				t.Fatalf("stage, time or headroom wrong: %+v", got)
			}
			if tc.withXcode != (len(got.XcodeVersions) == 1) || got.XcodeVersions == nil {
				t.Fatalf("XcodeVersions %q (want a list, empty when none)", got.XcodeVersions)
			}
		})
	}
}

func TestReportFailsWhenTheDiskCannotBeMeasured(t *testing.T) {
	boot := NewBootState()
	missing := filepath.Join(t.TempDir(), "gone")
	r := NewSystemReporter(SystemReporterOptions{XcodeRoot: t.TempDir(), DiskPath: missing}, boot,
		clocktesting.NewFakePassiveClock(time.Now()), (&logBuffer{}).logger())
	if _, err := r.Report(context.Background()); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("got %v, want a statfs error naming %s", err, missing)
	}
	if err := r.SelfCheck(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SelfCheck: got %v, want it to fail on the missing disk path", err)
	}
}

func TestSelfCheckPassesWithoutAnyXcode(t *testing.T) {
	r, _ := newTestReporter(t.TempDir(), 0, BootStageAgentStarted, &logBuffer{})
	if err := r.SelfCheck(); err != nil {
		t.Fatalf("SelfCheck on a root with no Applications: %v", err)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "Applications"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r, _ = newTestReporter(bad, 0, BootStageAgentStarted, &logBuffer{})
	if err := r.SelfCheck(); err == nil {
		t.Fatal("SelfCheck passed with Applications a file, want it to fail")
	}
}

func TestDiskHeadroomMatchesStatfs(t *testing.T) {
	dir := t.TempDir()
	first, err := DiskHeadroom(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Other tests write to the same volume: allow some drift.
	second, err := DiskHeadroom(dir)
	if err != nil || first <= 0 || second <= 0 || abs(first-second) > 1<<30 {
		t.Fatalf("got %d then %d, %v", first, second, err)
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func TestBootStagesOnlyMoveForward(t *testing.T) {
	for _, tc := range []struct {
		name string
		path []BootStage
		ok   bool
	}{
		{"booting to agent-started to ready is allowed", []BootStage{BootStageAgentStarted, BootStageReady}, true},
		{"booting straight to ready is allowed", []BootStage{BootStageReady}, true},
		{"repeating a stage is allowed", []BootStage{BootStageAgentStarted, BootStageAgentStarted}, true},
		{"ready back to agent-started is refused", []BootStage{BootStageReady, BootStageAgentStarted}, false},
		{"an unknown stage is refused", []BootStage{"desktop"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBootState()
			if b.Stage() != BootStageBooting {
				t.Fatalf("a new state is %q, want booting", b.Stage())
			}
			var err error
			for _, s := range tc.path {
				if err = b.Advance(s); err != nil {
					break
				}
			}
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrBadTransition)) {
				t.Fatalf("got %v, want ok=%t", err, tc.ok)
			}
			if want := tc.path[len(tc.path)-1]; tc.ok && b.Stage() != want {
				t.Fatalf("stage is %q, want %q", b.Stage(), want)
			}
		})
	}
}

func TestVersionsSortNumerically(t *testing.T) {
	got := []string{"16.10", "9.4.1", "16.2", "26.0 beta", "16.2.1", "26.0"}
	slices.SortFunc(got, compareVersions)
	want := []string{"9.4.1", "16.2", "16.2.1", "16.10", "26.0", "26.0 beta"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
