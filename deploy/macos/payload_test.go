package macos

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"howett.net/plist"

	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/mdm"
)

// readPlist parses a payload file with a real property-list parser, as
// launchd and codesign do, and wants a dictionary.
func readPlist(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	format, err := plist.Unmarshal(b, &m)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if format != plist.XMLFormat {
		t.Fatalf("%s: format %d, want XML: the file is read in review", name, format)
	}
	return m
}

// requireDaemonKeys asserts what launchd requires of a LaunchDaemon, and
// what MacRack requires of every one: a user named, never implied.
func requireDaemonKeys(t *testing.T, name string, p map[string]any) {
	t.Helper()
	for _, k := range []string{"Label", "ProgramArguments", "UserName"} {
		if _, ok := p[k]; !ok {
			t.Errorf("%s: no %s", name, k)
		}
	}
	if label, _ := p["Label"].(string); label+".plist" != filepath.Base(name) {
		t.Errorf("%s: Label %q: launchd and the postinstall find a daemon by its file's name", name, label)
	}
	if args, ok := p["ProgramArguments"].([]any); !ok || len(args) == 0 {
		t.Errorf("%s: ProgramArguments %#v", name, p["ProgramArguments"])
	} else if prog, _ := args[0].(string); !filepath.IsAbs(prog) {
		t.Errorf("%s: runs %q, not an absolute path", name, prog)
	}
	if _, ok := p["Program"]; ok {
		t.Errorf("%s: a Program key would run something else than ProgramArguments[0]", name)
	}
}

func TestEveryPayloadFileParses(t *testing.T) {
	seen := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		seen++
		switch {
		case strings.HasSuffix(path, ".go"):
		case strings.HasSuffix(path, ".plist"), strings.HasSuffix(path, ".entitlements"):
			readPlist(t, path)
		case strings.HasSuffix(path, ".json"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var v map[string]any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Errorf("%s: %v", path, err)
			}
		case strings.HasSuffix(path, ".sh"), filepath.Dir(path) == "scripts":
			info, err := d.Info()
			if err != nil {
				return err
			}
			if info.Mode()&0o111 == 0 {
				t.Errorf("%s is not executable: Installer and the workflow run it as it is", path)
			}
			if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
				t.Errorf("%s: %v: %s", path, err, out)
			}
		default:
			t.Errorf("%s: no test parses this payload file", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 7 {
		t.Fatalf("walked %d files: the payload is missing", seen)
	}
}

func TestTheEntitlementsGrantVirtualizationAlone(t *testing.T) {
	got := readPlist(t, "macrack.entitlements")
	if want := map[string]any{host.VirtualizationEntitlement: true}; !reflect.DeepEqual(got, want) {
		t.Fatalf("entitlements %#v, want exactly %#v", got, want)
	}
}

// agentDaemon is the agent's LaunchDaemon and what the other files
// must agree with.
type agentDaemon struct {
	user, group, stateDir, logDir string
	args                          []string
}

func readAgentDaemon(t *testing.T) agentDaemon {
	t.Helper()
	p := readPlist(t, "io.macrack.agent.plist")
	requireDaemonKeys(t, "io.macrack.agent.plist", p)
	var d agentDaemon
	d.user, _ = p["UserName"].(string)
	d.group, _ = p["GroupName"].(string)
	for _, a := range p["ProgramArguments"].([]any) {
		s, _ := a.(string)
		d.args = append(d.args, s)
		if v, ok := strings.CutPrefix(s, "--state-dir="); ok {
			d.stateDir = v
		}
	}
	out, _ := p["StandardOutPath"].(string)
	if errPath, _ := p["StandardErrorPath"].(string); out == "" || errPath != out {
		t.Errorf("stdout %q, stderr %q: want one log file", out, errPath)
	}
	d.logDir = filepath.Dir(out)
	if d.stateDir == "" || p["WorkingDirectory"] != d.stateDir {
		t.Errorf("state directory %q, working directory %v", d.stateDir, p["WorkingDirectory"])
	}
	return d
}

func TestTheAgentDaemonRunsUnprivilegedAndWaitsForItsProfile(t *testing.T) {
	p := readPlist(t, "io.macrack.agent.plist")
	d := readAgentDaemon(t)
	if d.user == "" || d.user == "root" || d.group == "" || d.group == "wheel" || d.group == "admin" {
		t.Fatalf("the agent runs as %s:%s, want its own unprivileged user and group", d.user, d.group)
	}
	want := []string{"/Library/MacRack/bin/agent", "--driver=vz", "--state-dir=" + d.stateDir,
		"--managed-preferences=" + mdm.ManagedPreferencesPath}
	if !reflect.DeepEqual(d.args, want) {
		t.Errorf("ProgramArguments %q, want %q", d.args, want)
	}
	// Kept alive while the chassis' profile is installed: launchd starts
	// the agent when the managed preferences appear, restarts it if it
	// dies, and does not spin it while they are absent.
	keep := map[string]any{"PathState": map[string]any{mdm.ManagedPreferencesPath: true}}
	if !reflect.DeepEqual(p["KeepAlive"], keep) {
		t.Errorf("KeepAlive %#v, want %#v", p["KeepAlive"], keep)
	}
	if _, ok := p["RunAtLoad"]; ok {
		t.Error("RunAtLoad would start the agent before its profile is installed")
	}
	// The VMs live in vm-helpers, the agent's children: an agent restart
	// must not take them down.
	if p["AbandonProcessGroup"] != true {
		t.Error("AbandonProcessGroup is not true: launchd would kill the helpers with the agent")
	}
	if p["Umask"] != uint64(0o077) {
		t.Errorf("Umask %v, want 63 (077): tokens and disks are the agent's alone", p["Umask"])
	}
}

func TestTheRebootDaemonRunsShutdownAndNothingElse(t *testing.T) {
	name := host.RebootDaemonLabel + ".plist"
	p := readPlist(t, name)
	requireDaemonKeys(t, name, p)
	if filepath.Join("/Library/LaunchDaemons", name) != host.RebootDaemonPlistPath {
		t.Fatalf("the agent looks for the reboot daemon at %s", host.RebootDaemonPlistPath)
	}
	if p["UserName"] != "root" {
		t.Fatalf("user %v: shutdown needs root", p["UserName"])
	}
	if got, want := p["ProgramArguments"], []any{"/sbin/shutdown", "-r", "now"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ProgramArguments %#v, want exactly %#v", got, want)
	}
	// Only a connection runs it: never at load, never kept alive.
	if p["RunAtLoad"] != false || p["KeepAlive"] != false || p["AbandonProcessGroup"] != true {
		t.Fatalf("RunAtLoad %v, KeepAlive %v, AbandonProcessGroup %v", p["RunAtLoad"], p["KeepAlive"], p["AbandonProcessGroup"])
	}
	if got := p["inetdCompatibility"]; !reflect.DeepEqual(got, map[string]any{"Wait": false}) {
		t.Fatalf("inetdCompatibility %#v", got)
	}
	want := map[string]any{"Listener": map[string]any{
		"SockType": "stream", "SockFamily": "Unix", "SockPathName": host.RebootSocketPath, "SockPathMode": uint64(0o666),
	}}
	if got := p["Sockets"]; !reflect.DeepEqual(got, want) {
		t.Fatalf("Sockets %#v, want %#v", got, want)
	}
	if filepath.Dir(host.RebootSocketPath) != host.RebootSocketDir {
		t.Fatalf("socket %s outside %s", host.RebootSocketPath, host.RebootSocketDir)
	}
	for _, k := range []string{"WatchPaths", "QueueDirectories", "StartInterval", "StartCalendarInterval", "EnvironmentVariables"} {
		if _, ok := p[k]; ok {
			t.Errorf("%s would run the job without a request, or change what it runs", k)
		}
	}
}

func TestNoDaemonTouchesASecuritySetting(t *testing.T) {
	for _, name := range []string{"io.macrack.agent.plist", host.RebootDaemonLabel + ".plist", "scripts/postinstall", "build-pkg.sh"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		doc := strings.ToLower(string(b))
		for _, word := range []string{"nv" + "ram", "boot" + "-args", "bootargs", "csr" + "util", "hv_apple_isa" + "_vm_quota", "spctl"} {
			if strings.Contains(doc, word) {
				t.Errorf("%s mentions %q", name, word)
			}
		}
	}
}

// The values Apple's schema allows for the declaration's automatic
// actions (apple/device-management, softwareupdate.settings.yaml).
var automaticActionValues = []string{"Allowed", "AlwaysOn", "AlwaysOff"}

func TestTheDeclarationNeverInstallsOnItsOwn(t *testing.T) {
	b, err := os.ReadFile("softwareupdate-settings.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Type, Identifier, ServerToken string
		Payload                       struct {
			AutomaticActions map[string]string
			Deferrals        map[string]int
			Notifications    *bool
		}
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.Type != "com.apple.configuration.softwareupdate.settings" || d.Identifier == "" || d.ServerToken == "" {
		t.Fatalf("Type %q, Identifier %q, ServerToken %q", d.Type, d.Identifier, d.ServerToken)
	}
	for k, v := range d.Payload.AutomaticActions {
		if !slices.Contains(automaticActionValues, v) {
			t.Errorf("AutomaticActions.%s %q is not one of %q", k, v, automaticActionValues)
		}
	}
	for _, k := range []string{"InstallOSUpdates", "InstallSecurityUpdate"} {
		if d.Payload.AutomaticActions[k] != "AlwaysOff" {
			t.Errorf("AutomaticActions.%s %q: macOS would install, and restart, under a tenant's VMs", k, d.Payload.AutomaticActions[k])
		}
	}
	if got := d.Payload.Deferrals["MajorPeriodInDays"]; got != mdm.MajorUpgradeDeferralDays {
		t.Errorf("MajorPeriodInDays %d, the legacy profile's %d", got, mdm.MajorUpgradeDeferralDays)
	}
	for k, v := range d.Payload.Deferrals {
		if v < 1 || v > 90 {
			t.Errorf("Deferrals.%s %d is outside 1..90", k, v)
		}
	}
}
